"""The alerting rules keep the conventions an operator's other mixins keep: a
PoolscopeCamelCase name, a severity, a summary, a description and a runbook that
exists and states that severity; a `for:` on each; and promtool cases that see each
alert silent before its `for:`, firing after it and resolved once the fault clears, and
still firing hours into a fault that lasts. The Watchdog is the one exception, as in
kube-prometheus: severity `none`, no `for:`, and a case that sees it firing at every
evaluation. An alert may be two rules of one name (a window per kind of input): they
share its runbook and its cases."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.prometheus import REPO
from poolscope.contract.thresholds import (
    ALERT_INTERVAL_S,
    ERROR_RATES_INTERVAL_S,
    RUNBOOK_URL,
)
from rules.render import duration

ALERTS = REPO / "rules" / "alerts.yml"
RUNBOOKS = REPO / "docs" / "runbooks.md"
SEVERITIES = {"critical", "warning", "info"}
WATCHDOG = "PoolscopeWatchdog"
SUSTAINED_S = 3600.0
"""How far into a lasting fault some case must still see each alert firing (and at least
three of its `for:`): past every memory the rules keep of an input that vanished (a
member for MEMBER_MEMORY, the Proxy's for FORGET_AFTER_S), where an alert that forgot its
fault with its input would have resolved."""


def _groups() -> list[dict[str, Any]]:
    return list(yaml.safe_load(ALERTS.read_text())["groups"])


def _alerts() -> list[tuple[str, dict[str, Any]]]:
    return [(g["name"], r) for g in _groups() for r in g["rules"] if "alert" in r]


def _ids() -> list[str]:
    return [r["alert"] for _, r in _alerts()]


def _named() -> dict[str, tuple[str, float]]:
    """Each alert's group and longest `for:` in seconds, by name, over its rules."""
    named: dict[str, tuple[str, float]] = {}
    for group, rule in _alerts():
        hold = _seconds(rule.get("for", "0s"))
        named[rule["alert"]] = (group, max(hold, named.get(rule["alert"], (group, 0.0))[1]))
    return named


@pytest.mark.parametrize(("group", "rule"), _alerts(), ids=_ids())
def test_an_alert_keeps_the_conventions(group: str, rule: dict[str, Any]) -> None:
    name = rule["alert"]
    assert re.fullmatch(r"Poolscope(?:[A-Z][a-z]+)+", name), name
    assert set(rule["annotations"]) == {"summary", "description", "runbook_url"}
    assert rule["annotations"]["runbook_url"] == f"{RUNBOOK_URL}#{name.lower()}"
    assert group.startswith("poolscope.alerts.")
    if name == WATCHDOG:
        assert rule["labels"]["severity"] == "none" and "for" not in rule
        return
    assert rule["labels"]["severity"] in SEVERITIES
    assert re.fullmatch(r"(\d+[hms])+", rule["for"]), f"{name} has no `for:`"


def test_every_alert_has_a_runbook_section_and_every_section_an_alert() -> None:
    sections = re.findall(r"^## (Poolscope\w+)$", RUNBOOKS.read_text(), flags=re.M)
    assert sorted(sections) == sorted(set(_ids()))


def test_each_runbook_section_opens_with_its_alerts_severity() -> None:
    """The on-call reads the severity in the page and again in the runbook: they agree."""
    opening = dict(re.findall(r"^## (Poolscope\w+)\n\n\*\*(\w+)\.\*\*", RUNBOOKS.read_text(),
                              flags=re.M))
    assert opening == {r["alert"]: r["labels"]["severity"].capitalize() for _, r in _alerts()}


def _expectations(group: str, name: str) -> list[list[tuple[float, bool]]]:
    """Per case of the group's test file: (eval time, fires?) for the alert, in time order."""
    spec = yaml.safe_load((REPO / "rules" / "tests" / f"{group}.yml").read_text())
    return [sorted((_seconds(t["eval_time"]), bool(t["exp_alerts"]))
                   for t in case.get("alert_rule_test", []) if t["alertname"] == name)
            for case in spec["tests"]]


def _seconds(duration: str) -> float:
    units = {"h": 3600, "m": 60, "s": 1}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([hms])", duration))


@pytest.mark.parametrize(("group", "rule"), _alerts(), ids=_ids())
def test_an_alert_is_seen_pending_firing_and_resolved(group: str, rule: dict[str, Any]) -> None:
    """Some case of its group's file expects it silent, then firing, then silent again;
    the Watchdog's, firing from the first evaluation to the last."""
    name = rule["alert"]
    patterns = ["".join("F" if fires else "." for _, fires in case)
                for case in _expectations(group, name)]
    expected = r"F{3,}" if name == WATCHDOG else r".*\.F+\..*"
    assert any(re.fullmatch(expected, p) for p in patterns), (name, patterns)


@pytest.mark.parametrize("name", sorted(_named()))
def test_an_alert_keeps_firing_while_its_fault_lasts(name: str) -> None:
    """Some case of its group's file expects it firing at least max(3 x its `for:`,
    SUSTAINED_S) into a fault: counted from the latest the fault can have begun, the
    first firing evaluation of the run less the `for:`. An alert whose input vanishes
    with its fault (a silent source, a pool that left the rollups) fails here."""
    group, hold = _named()[name]
    needed = max(3 * hold, SUSTAINED_S)
    held = []
    for case in _expectations(group, name):
        since = None
        for at, fires in case:
            since = (at if since is None else since) if fires else None
            if since is not None:
                held.append(at - (since - hold))
    assert max(held, default=0.0) >= needed, (name, max(held, default=None), needed)


def test_the_operator_docs_name_every_alert() -> None:
    for doc in (REPO / "docs" / "metrics.md", REPO / "docs" / "operating.md"):
        text = doc.read_text()
        missing = [name for name in _ids() if name not in text]
        assert not missing, f"{doc.name} does not name {missing}"


def test_the_operator_docs_tables_give_each_alert_its_severity() -> None:
    """metrics.md's and operating.md's alert tables repeat each severity: they agree."""
    expected = {r["alert"]: r["labels"]["severity"] for _, r in _alerts()}
    for doc in (REPO / "docs" / "metrics.md", REPO / "docs" / "operating.md"):
        rows = dict(re.findall(r"^\| `(Poolscope\w+)` \| (\w+) \|", doc.read_text(), flags=re.M))
        assert rows == expected, doc.name


def test_alert_test_files_are_named_for_their_group() -> None:
    for group in _groups():
        alerting = any("alert" in r for r in group["rules"])
        assert group["interval"] == duration(
            ALERT_INTERVAL_S if alerting else ERROR_RATES_INTERVAL_S), group["name"]
        path: Path = REPO / "rules" / "tests" / f"{group['name']}.yml"
        assert yaml.safe_load(path.read_text())["rule_files"] == ["../alerts.yml"]
