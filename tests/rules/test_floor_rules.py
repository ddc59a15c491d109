"""bench/floor_rules stays the floor of today's summary, not of an older one.

The rules' cost is reported as a ratio to the floor (docs/benchmarks.md); a floor
that no longer reads what a field needs, or lacks a field, would make that ratio
flatter than the truth. So: a floor rule per summary field, each reading every raw
series that field's recording rules read (a second input of one field is not paid
for by another field reading it), and data_quality reading every rollup the
recording rules' data_quality is derived from.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from harness.prometheus import REPO
from poolscope.contract.fields import rollup_names

FLOOR = REPO / "bench" / "floor_rules" / "proxy_pool.yml"
RECORDING_RULES = REPO / "rules" / "proxy_pool.yml"
# A raw series: an exporter's name, never a recorded `level:metric:operations` one.
RAW_NAME = re.compile(r"\bpoolscope_[a-z0-9_]+\b")
RECORDED_NAME = re.compile(r"\bproxy_pool:[a-z0-9_:]+")
FLOOR_NAME = re.compile(r"\bfloor_pool:[a-z0-9_:]+")
DATA_QUALITY = "data_quality"


def _exprs(path: Path) -> dict[str, str]:
    """Each record's expressions, joined (a state set has one rule per state)."""
    exprs: dict[str, str] = {}
    for group in yaml.safe_load(path.read_text())["groups"]:
        for rule in group["rules"]:
            field = rule["record"].split(":", 1)[-1]
            exprs[field] = exprs.get(field, "") + "\n" + rule["expr"]
    return exprs


def raw_inputs(path: Path, fields: set[str]) -> dict[str, set[str]]:
    """The raw series each of `fields` reads, with those of the records it reads that
    are not fields of their own (the rules' admission level, under its state set)."""
    exprs = _exprs(path)

    def reads(field: str) -> set[str]:
        expr = exprs[field]
        inner = _fields_read(RECORDED_NAME.findall(expr))
        return set(RAW_NAME.findall(expr)).union(
            *(reads(name) for name in inner - fields - {field} if name in exprs))

    return {field: reads(field) for field in fields if field in exprs}


def short_fields(floor: Path = FLOOR) -> dict[str, set[str]]:
    fields = set(_exprs(floor))
    wanted = raw_inputs(RECORDING_RULES, fields)
    have = raw_inputs(floor, fields)
    return {f: wanted[f] - have[f] for f in wanted if wanted[f] - have[f]}


def _fields_read(names: list[str]) -> set[str]:
    return {name.split(":", 1)[1] for name in names}


def rollups_data_quality_skips(floor: Path = FLOOR) -> set[str]:
    wanted = _fields_read(RECORDED_NAME.findall(_exprs(RECORDING_RULES)[DATA_QUALITY]))
    read = _fields_read(FLOOR_NAME.findall(_exprs(floor)[DATA_QUALITY]))
    return wanted - read - {DATA_QUALITY}


def test_each_floor_rule_reads_every_raw_series_its_field_reads() -> None:
    short = short_fields()
    assert not short, f"the floor does not read what these fields read: {short}; add it in {FLOOR}"


def test_every_raw_series_the_rules_read_belongs_to_a_field() -> None:
    """No rule's input escapes the check above by sitting in a record no field reads."""
    read = set().union(*raw_inputs(RECORDING_RULES, set(_exprs(FLOOR))).values())
    everything = set(RAW_NAME.findall("\n".join(_exprs(RECORDING_RULES).values())))
    assert everything <= read, f"read by no field: {sorted(everything - read)}"


def test_the_floor_data_quality_reads_every_rollup_it_is_derived_from() -> None:
    skipped = rollups_data_quality_skips()
    assert not skipped, f"floor_pool:data_quality does not read {sorted(skipped)}"


def test_the_floor_has_a_rule_per_summary_field() -> None:
    floor = {f"floor_pool:{field}" for field in _exprs(FLOOR)}
    wanted = {name.replace("proxy_pool:", "floor_pool:", 1) for name in rollup_names()}
    assert wanted <= floor, f"no floor rule for {sorted(wanted - floor)}"


@pytest.mark.parametrize(("old", "field", "series"), [
    ("poolscope_engine_requests_waiting", "engine_requests_waiting:sum",
     "poolscope_engine_requests_waiting"),
    # another field (gpus.count) still reads the healthy counts: gpus.used must too
    ('poolscope_instance_gpus{health="healthy"}', "gpu_utilization:sum",
     "poolscope_instance_gpus"),
])
def test_a_field_input_the_floor_leaves_out_is_caught(
        tmp_path: Path, old: str, field: str, series: str) -> None:
    """The checks above can fail: a floor field without one of its inputs is short."""
    text = FLOOR.read_text()
    assert old in text
    short = tmp_path / "floor.yml"
    short.write_text(text.replace(old, "poolscope_x"))
    assert series in short_fields(short).get(field, set())


def test_a_rollup_the_floor_data_quality_leaves_out_is_caught(tmp_path: Path) -> None:
    line = "            and on (proxy_id) floor_pool:kv_cache_usage:max\n"
    text = FLOOR.read_text()
    assert line in text
    short = tmp_path / "floor.yml"
    short.write_text(text.replace(line, ""))
    assert rollups_data_quality_skips(short) == {"kv_cache_usage:max"}
