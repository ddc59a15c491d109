"""deploy/alertmanager/alertmanager.yml, the example config docs/operating.md runs:
amtool accepts it, every severity the rules use reaches the receiver its comment
promises (the Watchdog its own), each inhibit rule names alerts that exist and carry
the labels it compares, and in a real Alertmanager a cause holds back only its own
symptoms."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from harness.polling import eventually
from harness.prometheus import REPO, RULE_FILES, binary
from tests.support.alertmanager import EXAMPLE, running_alertmanager

RECEIVERS = {"critical": "page", "warning": "ticket", "info": "low-noise", "none": "watchdog"}
WATCHDOG = "PoolscopeWatchdog"
ALERT_TESTS = sorted((REPO / "rules" / "tests").glob("poolscope.alerts.*.yml"))
MATCHER = re.compile(r'^\s*(\w+)\s*(=~|!~|!=|=)\s*"(.*)"\s*$')


def _amtool(*args: str, cwd: Path | None = None) -> str:
    done = subprocess.run([binary("amtool"), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_amtool_accepts_it_from_another_directory(tmp_path: Path) -> None:
    assert "SUCCESS" in _amtool("check-config", str(EXAMPLE), cwd=tmp_path)


def _rules() -> Iterator[dict]:
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            yield from (rule for rule in group["rules"] if "alert" in rule)


def _severities() -> dict[str, str]:
    return {rule["alert"]: rule["labels"]["severity"] for rule in _rules()}


@pytest.mark.parametrize(("alertname", "severity"), _severities().items())
def test_each_alert_reaches_its_severitys_receiver(alertname: str, severity: str) -> None:
    found = _amtool("config", "routes", "test", f"--config.file={EXAMPLE}",
                    f"alertname={alertname}", f"severity={severity}", "proxy_id=pool-1")
    assert found.strip() == RECEIVERS[severity]


def test_the_watchdog_alone_reaches_the_dead_mans_switch() -> None:
    """The Watchdog is routed by name; a `severity=none` alert of another name is not
    a heartbeat, and pages as any alert without a known severity does."""
    assert {name for name, sev in _severities().items() if sev == "none"} == {WATCHDOG}
    found = _amtool("config", "routes", "test", f"--config.file={EXAMPLE}",
                    "alertname=PoolscopeOther", "severity=none")
    assert found.strip() == "page"


def _matches(matchers: list[str], labels: dict[str, str]) -> bool:
    """Alertmanager's matcher semantics for the forms the example uses (an absent
    label is the empty string; regexes are anchored)."""
    for matcher in matchers:
        m = MATCHER.match(matcher)
        assert m, f"unparsed matcher {matcher!r}"
        name, op, value = m.groups()
        have = labels.get(name, "")
        ok = {"=": have == value, "!=": have != value,
              "=~": re.fullmatch(value, have) is not None,
              "!~": re.fullmatch(value, have) is None}[op]
        if not ok:
            return False
    return True


def _fired_label_sets() -> list[dict[str, str]]:
    """Every label set the promtool cases expect an alert to fire with: what the rules
    give each alert, checked by promtool, so this test reads labels, not expressions."""
    found = []
    for path in ALERT_TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                found += [{"alertname": check["alertname"], **alert["exp_labels"]}
                          for alert in check["exp_alerts"] or []]
    return found


@pytest.mark.parametrize("rule", yaml.safe_load(EXAMPLE.read_text())["inhibit_rules"],
                         ids=lambda r: "+".join(r["source_matchers"]))
def test_each_inhibit_rule_names_alerts_that_carry_its_equal_labels(rule: dict) -> None:
    """A source and a target it names by alertname exist, and fire with every label the
    rule compares: one without it would compare as "" and never (or always) match."""
    fired = _fired_label_sets()
    for side in ("source_matchers", "target_matchers"):
        chosen = [labels for labels in fired if _matches(rule[side], labels)]
        assert chosen, f"{side} {rule[side]} select no alert the promtool cases fire"
        for labels in chosen:
            missing = [name for name in rule.get("equal", []) if not labels.get(name)]
            assert not missing, f"{labels['alertname']} fires without {missing}"


def _alert(name: str, proxy_id: str | None = None, **labels: str) -> dict[str, dict[str, str]]:
    """An alert as the rules label it: its own severity, its pool when it names one."""
    pool = {"proxy_id": proxy_id} if proxy_id else {}
    return {"labels": {"alertname": name, "severity": _severities()[name], **pool, **labels}}


def test_a_cause_inhibits_only_its_own_symptoms(tmp_path: Path) -> None:
    with running_alertmanager(tmp_path, yaml.safe_load(EXAMPLE.read_text())) as am:
        sent = [
            # pool-a has no member alive: its warnings and infos are symptoms.
            _alert("PoolscopePoolNoAliveMembers", "pool-a"),
            _alert("PoolscopePoolMembersStale", "pool-a"),
            _alert("PoolscopeIdleInstanceHoldsGpus", "pool-a", instance_id="a1"),
            # pool-b: one exporter down explains its partial data, not its saturation.
            _alert("PoolscopeInstanceExporterDown", "pool-b", instance_id="b1"),
            _alert("PoolscopePoolResourceDataPartial", "pool-b"),
            _alert("PoolscopePoolSaturated", "pool-b"),
            # pool-c's stale members have no cause firing.
            _alert("PoolscopePoolMembersStale", "pool-c"),
            # Fleet-wide and without a pool: a pool's cause must not reach them.
            _alert("PoolscopeRulesFailing", rule_group="poolscope.proxy_pool"),
            _alert("PoolscopeWatchdog"),
        ]
        am.post(sent)

        def inhibited() -> set[tuple[str, str]]:
            """(alertname, proxy_id) of the alerts inhibited, once all are in."""
            alerts = am.alerts()
            if len(alerts) < len(sent):
                return {("still arriving", str(len(alerts)))}
            return {(a["labels"]["alertname"], a["labels"].get("proxy_id", ""))
                    for a in alerts if a["status"]["inhibitedBy"]}

        expected = {("PoolscopePoolMembersStale", "pool-a"),
                    ("PoolscopeIdleInstanceHoldsGpus", "pool-a"),
                    ("PoolscopePoolResourceDataPartial", "pool-b")}
        eventually(inhibited, expected.__eq__, 30, "only the causes' own symptoms inhibited")
