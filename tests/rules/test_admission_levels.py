"""The rules compare admission levels as numbers (`== bool 5`, `== 2`), which the
catalog defines (ADMISSION_LEVELS): a renumbering there that misses a rule would
turn one state into another silently, so the numbers are checked here."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from poolscope.contract.catalog import ADMISSION_LEVELS, ADMISSION_STATES

RULES = Path(__file__).resolve().parents[2] / "rules" / "src" / "proxy_pool.yml"


def _rules() -> list[dict[str, object]]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def test_each_pool_admission_state_is_its_catalog_level() -> None:
    states = {r["labels"]["state"]: str(r["expr"]).strip() for r in _rules()
              if r.get("record") == "proxy_pool:admission_state"}
    assert list(states) == list(ADMISSION_STATES)
    assert states == {s: f"proxy_pool:admission_level:max == bool {ADMISSION_LEVELS[s]}"
                      for s in ADMISSION_STATES}


def test_the_rules_that_pick_asleep_members_use_its_level() -> None:
    """The asleep count and the capacity that leaves asleep members out."""
    picks = {r["record"]: re.findall(r"poolscope_instance_admission_level == (\d+)",
                                     str(r["expr"]))
             for r in _rules() if "record" in r}
    picked = {record: levels for record, levels in picks.items() if levels}
    assert picked == {"proxy_pool:capacity_requests:sum": [str(ADMISSION_LEVELS["asleep"])],
                      "proxy_pool:instances_asleep:count": [str(ADMISSION_LEVELS["asleep"])]}
