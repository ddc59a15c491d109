"""bench.rules_eval's alert figures and bench.backfill's history, without a fleet: the
long windows are found with the interval their series are written at, a backfilled
history is what a real Prometheus then reads over the window, the alert groups are
charged per 5 s, and a bad --history is refused before anything starts. Nothing here
times anything; the figures are in docs/benchmarks.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from bench.backfill import HISTORY_FLAGS, Window, backfill, duration_s, long_windows
from bench.rules_eval import Result, alerts_table, has_alerts, parse_args
from harness.prometheus import REPO, running_prometheus
from tests.support.flags import refused

RULES = {"groups": [
    {"name": "records", "rules": [
        {"record": "pool:up:last", "expr": 'label_replace(vector(1), "proxy_id", "pa", "", "")'}]},
    {"name": "memory", "interval": "1m", "rules": [
        {"record": "pool:up:last1m", "expr": "last_over_time(pool:up:last[1m])"}]},
    {"name": "alerts", "interval": "15s", "rules": [
        {"alert": "Remembered", "expr": "last_over_time(pool:up:last1m[6h]) == 0"},
        {"alert": "Raw", "expr": 'max_over_time(up{job="x"}[2h]) == 0 and rate(up[5m]) > 0'},
        {"alert": "Subquery", "expr": "max_over_time(pool:up:last[1h:1m]) > 1"}]}]}


@pytest.mark.parametrize(("text", "seconds"), [("6h", 21600), ("1h30m", 5400), ("15s", 15),
                                               ("500ms", 0.5)])
def test_durations_are_read_as_prometheus_writes_them(text: str, seconds: float) -> None:
    assert duration_s(text) == seconds


@pytest.mark.parametrize("text", ["", "6", "6x", "h6", "1h 2m"])
def test_a_text_that_is_no_duration_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        duration_s(text)


def test_long_windows_are_written_at_their_own_interval(tmp_path: Path) -> None:
    """A recorded series at its group's interval (the evaluation interval without one), a
    scraped one at the scrape interval; a window the warm-up fills, and a subquery's
    range, need no history."""
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump(RULES))
    assert long_windows([rules], scrape_interval_s=5, evaluation_interval_s=5) == [
        Window("pool:up:last1m", 21600, 60), Window('up{job="x"}', 7200, 5)]


def test_the_shipped_alerts_remember_pools_from_records_written_once_a_minute() -> None:
    """Every window of hours over pool series reads a once-a-minute record, not a 5 s series
    (docs/benchmarks.md, "Alerts beside the recording rules")."""
    windows = long_windows(sorted((REPO / "rules").glob("*.yml")), 5, 5)
    assert windows and all(w.step_s == 60 for w in windows), windows


def test_alert_groups_are_charged_per_5_s_beside_the_recording_rules() -> None:
    result = Result(1000, 0, 0, 50.0, pools=10, history_s=21600,
                    alert_groups={"poolscope.alerts.pools", "poolscope.alerts.memory"})
    result.group_seconds = {"poolscope.proxy_pool": [0.2, 0.4],
                            "poolscope.alerts.pools": [0.09],
                            "poolscope.alerts.memory": [0.6]}
    result.group_interval = {"poolscope.proxy_pool": 5, "poolscope.alerts.pools": 15,
                             "poolscope.alerts.memory": 60}
    assert result.groups_seconds(alerts=False) == pytest.approx(0.3)
    assert result.groups_seconds(alerts=True) == pytest.approx(0.03 + 0.05)
    assert "| 1,000 | 10 | rules | 6 h | 300.0 ms | 80.0 ms | 0.27x |" in alerts_table([result])


def test_the_alerts_file_is_the_alerts_and_the_rollups_are_not() -> None:
    assert has_alerts(REPO / "rules" / "alerts.yml")
    assert not has_alerts(REPO / "rules" / "proxy_pool.yml")


@pytest.mark.parametrize("argv", [["--history", "6x"], ["--history", "0s"], ["--history", ""]])
def test_a_bad_history_exits_2_naming_it(argv: list[str],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert "argument --history:" in refused(parse_args, argv, capsys)


@pytest.mark.integration
def test_a_backfilled_history_is_what_prometheus_reads_over_the_window(tmp_path: Path) -> None:
    """The once-a-minute record gets six hours of samples before the head, at its value, and
    Prometheus reads them all (backfill waits for its next scan of its blocks)."""
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump(RULES))
    windows = [w for w in long_windows([rules], 1, 1) if w.selector == "pool:up:last1m"]
    with running_prometheus(tmp_path / "prom", [], rule_files=[rules], evaluation_interval="1s",
                            retention="1d", flags=HISTORY_FLAGS) as prom:
        prom.wait_for("pool:up:last1m", timeout=120)
        assert backfill(prom, windows, 21600) == 21600 // 60
        counted = prom.query("count_over_time(pool:up:last1m[6h])")
        assert [s["metric"] for s in counted] == [{"proxy_id": "pa"}]
        # The window has moved on since the head began: its oldest samples have left it.
        assert float(counted[0]["value"][1]) >= 0.9 * 360
        assert prom.query("min_over_time(pool:up:last1m[6h]) < 1") == []
