"""bench/floor_rules stays the floor of today's summary, not of an older one.

The rules' cost is reported as a ratio to the floor (docs/benchmarks.md); a floor
that no longer reads what the rules read, or lacks a field, would make that ratio
flatter than the truth. So: a floor rule per summary field, and every raw series
the recording rules read is read by the floor too.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from poolscope.bridge.fields import rollup_names
from tests.support.prometheus import REPO

FLOOR = REPO / "bench" / "floor_rules" / "proxy_pool.yml"
RECORDING_RULES = REPO / "rules" / "proxy_pool.yml"
# A raw series: an exporter's name, never a recorded `level:metric:operations` one.
RAW_NAME = re.compile(r"\bpoolscope_[a-z0-9_]+\b")


def _rules(path: Path) -> list[dict[str, str]]:
    return [rule for group in yaml.safe_load(path.read_text())["groups"]
            for rule in group["rules"]]


def raw_series(path: Path) -> set[str]:
    return {name for rule in _rules(path) for name in RAW_NAME.findall(rule["expr"])}


def test_the_floor_reads_every_raw_series_the_rules_read() -> None:
    missing = raw_series(RECORDING_RULES) - raw_series(FLOOR)
    assert not missing, f"the rules read {sorted(missing)}, the floor does not: add them to {FLOOR}"


def test_the_floor_has_a_rule_per_summary_field() -> None:
    floor = {rule["record"] for rule in _rules(FLOOR)}
    wanted = {name.replace("proxy_pool:", "floor_pool:", 1) for name in rollup_names()}
    assert wanted <= floor, f"no floor rule for {sorted(wanted - floor)}"


def test_a_raw_series_read_by_the_rules_alone_is_caught(tmp_path: Path) -> None:
    """The check above can fail: a floor without one of the rules' inputs is short."""
    text = FLOOR.read_text().replace("poolscope_engine_requests_waiting", "poolscope_x")
    short = tmp_path / "floor.yml"
    short.write_text(text)
    assert "poolscope_engine_requests_waiting" in raw_series(RECORDING_RULES) - raw_series(short)
