"""The rules' `complete` asks for every field the bridge reports, so the two never disagree.

The Scheduler bridge never calls a pool summary complete while a field is null; the
rule's `complete` must therefore require every rollup that contract/fields.py
names. A field added there and not to the rule
would make Grafana and the console say complete where the JSON says partial;
this test catches that, and proves it can catch it by deleting each reference.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from harness.prometheus import REPO
from poolscope.contract.fields import DATA_QUALITY_LABEL, DATA_QUALITY_ROLLUP, FIELDS, Field, Kind

RULE_FILE = REPO / "rules" / "proxy_pool.yml"
ELSEWHERE = "proxy_pool:not_a_field"


def _complete_expr() -> str:
    rules: list[dict[str, Any]] = [
        r for g in yaml.safe_load(RULE_FILE.read_text())["groups"] for r in g["rules"]]
    [rule] = [r for r in rules if r["record"] == DATA_QUALITY_ROLLUP
              and r["labels"][DATA_QUALITY_LABEL] == "complete"]
    return str(rule["expr"])


def _reference(field: Field) -> re.Pattern[str]:
    """How the rule must read the field's rollup: the whole name, narrowed by exactly
    the field's matchers, and `== 1` for a state set (the bridge reads a state only
    from a series that is 1)."""
    selector = re.escape(field.rollup) + r"(?![\w:])"
    if field.matchers:
        selector += r"\s*\{\s*" + r"\s*,\s*".join(
            rf'{re.escape(k)}\s*=\s*"{re.escape(v)}"' for k, v in sorted(field.matchers.items())
        ) + r"\s*\}"
    else:
        selector += r"(?!\s*\{)"
    if field.kind is Kind.STATE:
        selector += r"\s*==\s*1(?![\w.])"
    return re.compile(r"(?<![\w:])" + selector)


def unreferenced(expr: str) -> list[str]:
    """The paths of the fields whose rollup the expression does not require."""
    return [f.path for f in FIELDS if not _reference(f).search(expr)]


def test_complete_requires_every_field_the_bridge_reports() -> None:
    assert unreferenced(_complete_expr()) == []


@pytest.mark.parametrize("field", FIELDS, ids=lambda f: f.path)
def test_a_field_left_out_of_complete_is_caught(field: Field) -> None:
    expr = _complete_expr()
    without = _reference(field).sub(ELSEWHERE, expr)
    assert without != expr
    assert unreferenced(without) == [field.path]


@pytest.mark.parametrize(("expr", "path"), [
    ('proxy_pool:queue_depth:sum{queue="ready"}', "load.prepare_queue_depth"),
    ("proxy_pool:queue_depth:sum", "load.ready_queue_depth"),
    ("proxy_pool:admission_state", "health.pool_admission_state"),
    ("proxy_pool:admission_state == 10", "health.pool_admission_state"),
    ("proxy_pool:gpu_utilization:avg_by_model", "utilization.gpu_util_avg"),
    ('proxy_pool:cpu_utilization:avg{proxy_id="p1"}', "utilization.cpu_avg"),
    ('proxy_pool:cpu_utilization:max {proxy_id="p1"}', "utilization.cpu_max"),
])
def test_a_loose_reference_does_not_count(expr: str, path: str) -> None:
    """A reference to the wrong queue, any state, a longer name or one pool only
    would let a null field through."""
    assert path in unreferenced(expr)
