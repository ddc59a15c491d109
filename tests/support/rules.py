"""Facts the rule files state once, read back for the code and tests that must agree."""

from __future__ import annotations

import re
from typing import Any

import yaml

from harness.prometheus import RULE_FILES

FRESHNESS_RULE = "proxy_pool:instances_with_resource:count"


def every_rule() -> list[dict[str, Any]]:
    """Every recording rule and alert of rules/, in file order."""
    return [r for path in RULE_FILES for g in yaml.safe_load(path.read_text())["groups"]
            for r in g["rules"]]


def fresh_threshold_s() -> float:
    """How old a host sample may be and still count as fresh, from `FRESHNESS_RULE`.

    Everything else that judges freshness (the Proxy bridge's diagnosis, tests
    waiting for staleness, scrape intervals) must follow this number.
    """
    rules = [r for r in every_rule() if r.get("record") == FRESHNESS_RULE]
    assert len(rules) == 1, f"expected one {FRESHNESS_RULE} rule, found {len(rules)}"
    threshold = re.search(r"<=\s*(\d+(?:\.\d+)?)", rules[0]["expr"])
    assert threshold, f"{FRESHNESS_RULE} no longer compares `<= N`"
    return float(threshold.group(1))
