"""The thresholds written into the rule files are the ones exporters/common/thresholds.py
holds: the exporters apply them too (the Instance exporter's freshness, the Proxy's
idle count), so a rule edited alone would judge by a number nobody else uses."""

from __future__ import annotations

import re

import yaml

from exporters.common import thresholds
from tests.support.prometheus import RULE_FILES

RULES = {r["record"] + repr(r.get("labels", {})): r["expr"]
         for path in RULE_FILES for g in yaml.safe_load(path.read_text())["groups"]
         for r in g["rules"]}


def _rule(record: str) -> str:
    [expr] = [e for key, e in RULES.items() if key.startswith(record + "{")]
    return expr


def _numbers(pattern: str, text: str) -> set[float]:
    return {float(m) for m in re.findall(pattern, text)}


def test_freshness_threshold() -> None:
    expr = _rule("proxy_pool:instances_with_resource:count")
    assert _numbers(r"<=\s*(\d+(?:\.\d+)?)", expr) == {thresholds.FRESH_S}


def test_member_memory() -> None:
    expr = _rule("proxy_pool:instances:count")
    assert set(re.findall(r"last_over_time\([^\[]*\[(\w+)\]\)", expr)) == {
        thresholds.MEMBER_MEMORY}


def test_the_rule_files_state_the_same_constants_in_their_header() -> None:
    header = RULE_FILES[0].read_text()
    for name in ("FRESH_S", "IDLE_S", "WAITING_Q", "KV_FULL", "MEMBER_MEMORY"):
        value = getattr(thresholds, name)
        text = value if isinstance(value, str) else f"{value:g}"
        assert re.search(rf"#\s+{name}\s+=\s+{re.escape(text)}\b", header), name
