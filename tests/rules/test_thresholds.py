"""Every threshold is written once, in contract/thresholds.py: the rule files
and docs/thresholds.md are rendered from it (`python -m rules.render`), the dashboards
import it. A rendered copy edited by hand, or a number a template writes itself, fails here."""

from __future__ import annotations

import re
from collections.abc import Mapping

import pytest
import yaml

from dashboards.__main__ import rendered as rendered_dashboards
from harness.prometheus import RULE_FILES
from poolscope.contract import thresholds
from rules import render

# Where each threshold the rules apply must reach, by record: a template that wrote
# the number itself instead would keep its old value when thresholds.py changes.
EXPRESSIONS_USING = {
    "FRESH_S": {"proxy_pool:instances_with_resource:count", "PoolscopeRollupsLate"},
    "MEMBER_MEMORY": {"proxy_pool:instances:count", "proxy_pool:inflight_requests:sum",
                      "proxy_pool:requests:rate1m"},
    "ALERT_MEMORY_S": {"PoolscopeProxySourceSilent", "PoolscopePoolDataMissing",
                       "PoolscopePoolNoAliveMembers"},
    "IDLE_GPUS_S": {"PoolscopeIdleInstanceHoldsGpus"},
    "ALERT_JOBS": {"PoolscopeTargetDown"},
    # The network rates and the engines' QPS are the exporters' own (window_rate.py).
    **dict.fromkeys(("RATE_WINDOW_S", "RATE_EDGE_S", "RATE_EDGE_OFFSET_S"),
                    frozenset({"proxy_pool:requests:rate1m"})),
}
# What the rules only explain, by the record whose comment states it.
COMMENTS_USING = {"IDLE_S": "proxy_pool:instances_idle:count",
                  "WAITING_Q": "proxy_pool:saturation:ratio",
                  "KV_FULL": "proxy_pool:saturation:ratio"}
DASHBOARD_THRESHOLDS = ("IDLE_S", "WAITING_Q", "KV_FULL", "RATIO_WARN")
# The admission levels the rules compare with are the catalog's numbers, not thresholds
# (tests/rules/test_admission_levels.py checks them), so they are no old copy of one.
LEVEL_COMPARISON = re.compile(r"admission_level(?::max)? == (?:bool )?\d+")


def _forms(value: render.Value) -> set[str]:
    """Every way a template can write the value: as is, or as a PromQL duration."""
    if isinstance(value, str):
        return {value}
    return {f"{value:g}", render.duration(value)} if value == int(value) else {f"{value:g}"}


def _written(form: str, text: str) -> bool:
    """`form` as a token of its own (`5m`, not the `5m` of `15m` or of `rate5m`)."""
    return re.search(rf"(?<![\w.]){re.escape(form)}(?![\w.])", text) is not None


def _rules(files: Mapping[object, str]) -> list[dict[str, str]]:
    return [r for text in files.values() for g in yaml.safe_load(text)["groups"]
            for r in g["rules"]]


def _exprs(files: Mapping[object, str]) -> dict[str, str]:
    """Each record's and each alert's expression, by name."""
    return {r.get("record") or r["alert"]: r["expr"] for r in _rules(files)}


def _sentinels() -> dict[str, render.Value]:
    """Every threshold at a value none has, each different."""
    return {name: f"{7 + i}h" if isinstance(value, str) else 1001.0 + 7 * i
            for i, (name, value) in enumerate(render.current().items())}


def test_committed_rule_files_and_doc_are_the_rendered_ones() -> None:
    for path, text in render.rendered().items():
        assert path.read_text() == text, f"{path.name} drifted: run `python -m rules.render`"


def test_every_rule_file_prometheus_loads_is_rendered() -> None:
    assert set(render.render_rules()) == set(RULE_FILES)


def test_a_changed_threshold_reaches_every_rule_and_leaves_no_old_copy() -> None:
    old, new = render.current(), _sentinels()
    files = render.render_rules(new)
    exprs, texts = _exprs(files), {r: t for f in files.values()
                                   for r, t in render.rule_texts(f).items()}
    for name, records in EXPRESSIONS_USING.items():
        for record in records:
            assert any(_written(f, exprs[record]) for f in _forms(new[name])), (name, record)
    for name, record in COMMENTS_USING.items():
        assert any(_written(f, texts[record]) for f in _forms(new[name])), (name, record)
    for name in (*EXPRESSIONS_USING, *COMMENTS_USING):
        for path, text in files.items():
            left = {f for f in _forms(old[name])
                    if _written(f, LEVEL_COMPARISON.sub("", text))}
            assert not left, f"{path.name} still writes {name} = {left}"


def test_every_alert_window_comes_from_a_threshold() -> None:
    """Each alert's `for:` is one of the ALERT_* windows, and each window is some alert's
    (the Watchdog has none: it fires from the first evaluation). ALERT_MEMORY_S is no
    `for:` but how long an expression remembers a vanished input, ALERT_MEMORY_INTERVAL_S
    how often what it remembers is recorded, ALERT_MEMORY_LIVE_S how far back it reads the
    input itself."""
    new = _sentinels()
    windows = {name: render.duration(float(new[name])) for name in new
               if name.startswith("ALERT_") and name.endswith("_S")
               and name not in ("ALERT_INTERVAL_S", "ALERT_MEMORY_S", "ALERT_MEMORY_INTERVAL_S",
                                "ALERT_MEMORY_LIVE_S")}
    used = {r["for"] for r in _rules(render.render_rules(new))
            if "alert" in r and r["alert"] != "PoolscopeWatchdog"}
    assert used <= set(windows.values()), used - set(windows.values())
    assert set(windows.values()) <= used, {n for n, w in windows.items() if w not in used}


def test_the_doc_states_each_threshold_and_where_the_rules_use_it() -> None:
    new = _sentinels()
    rows = {line.split(" | ")[0].strip("| `"): line for line in render.render_doc(new).splitlines()
            if line.startswith("| `")}
    assert set(rows) == set(render.current())
    for name, value in new.items():
        assert f" | {render.as_text(value)}" in rows[name], name
    for name, records in EXPRESSIONS_USING.items():
        assert all(f"`{r}`" in rows[name] for r in records), name


@pytest.mark.parametrize("name", DASHBOARD_THRESHOLDS)
def test_the_dashboards_read_the_threshold(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    before = rendered_dashboards()
    monkeypatch.setattr(thresholds, name, _sentinels()[name])
    assert rendered_dashboards() != before


def test_a_template_naming_no_threshold_fails_to_render() -> None:
    with pytest.raises(KeyError, match="FRESH_SECONDS"):
        render.substitute("x <= ${FRESH_SECONDS}", render.current())


@pytest.mark.parametrize(("seconds", "text"), [(60, "1m"), (52, "52s"), (8, "8s"),
                                               (3725, "1h2m5s")])
def test_durations_are_written_as_promql_does(seconds: float, text: str) -> None:
    assert render.duration(seconds) == text


def test_a_crashed_member_is_named_before_its_proxy_forgets_it() -> None:
    """The stale-members alert fires (its window and one evaluation after the member's
    heartbeats stop counting) before the embedded Proxy forgets the member."""
    from poolscope.exporters.proxy.registry import DEFAULT_HEARTBEAT_TIMEOUT
    stale, = (r for r in _rules(render.render_rules())
              if r.get("alert") == "PoolscopePoolMembersStale")
    units = {"s": 1, "m": 60, "h": 3600}
    window_s = sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([smh])", stale["for"]))
    assert (DEFAULT_HEARTBEAT_TIMEOUT + window_s + thresholds.ALERT_INTERVAL_S
            < thresholds.FORGET_AFTER_S), (stale["for"], thresholds.FORGET_AFTER_S)
