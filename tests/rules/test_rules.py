"""The recording rules: they load, they compute what their tests say, and they cover the bridge.

Each promtool test case runs on its own, so a failure names the case; a
mutated expectation must make promtool fail, so a harness that passed
everything would be caught. vmalert loads the same files, because a scale-out
deployment runs them there (docs/scaling.md).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.prometheus import REPO, binary
from poolscope.bridge.queries import FLEET_SERIES
from poolscope.contract.fields import FIELDS, Kind, rollup_names

RULES_DIR = REPO / "rules"
RULE_FILES = sorted(RULES_DIR.glob("*.yml"))
TEST_FILES = sorted((RULES_DIR / "tests").glob("*.yml"))
# Record-name levels a group may use beyond the pool level; the pool rollups' group also
# records one fleet series (when its evaluation is in); no group records per Instance.
LEVELS: dict[str, tuple[str, ...]] = {"poolscope.proxy_pool": ("proxy_pool", "fleet")}
POOL_LEVEL = "proxy_pool"
RECORD_NAME = re.compile(r"^[a-z_]+:[a-z0-9_]+:[a-z0-9_]+$|^proxy_pool:[a-z_]+$")
# A recorded series' name as a rule reads it.
RECORDED = re.compile(r"\b[a-z_]+:[a-z0-9_]+(?::[a-z0-9_]+)?\b")
# A rollup whose source depends on which input answered carries it dynamically:
# it aggregates `by (..., source)`, or sets it with label_replace(v, "source", ...)
# (the destination: the label name followed by the replacement and a source label).
DYNAMIC_SOURCE = re.compile(
    r"\bby\s*\([^)]*\bsource\b[^)]*\)"
    r'|label_replace\s*\([\s\S]*?,\s*"source"\s*,\s*"[^"]*"\s*,')


def _load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def _groups() -> list[dict[str, Any]]:
    return [g for f in RULE_FILES for g in _load(f)["groups"]]


def _rules() -> list[dict[str, Any]]:
    """The recording rules (the alerts are checked in test_alerts.py)."""
    return [r for g in _groups() for r in g["rules"] if "record" in r]


def _cases() -> list[tuple[Path, int, str]]:
    return [(f, i, case.get("name", "")) for f in TEST_FILES
            for i, case in enumerate(_load(f)["tests"])]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)


def _single_case_file(tmp_path: Path, test_file: Path, case: dict[str, Any]) -> Path:
    """The test file with one case only, its rule files made absolute."""
    spec = _load(test_file)
    spec["rule_files"] = [str((test_file.parent / r).resolve()) for r in spec["rule_files"]]
    spec["tests"] = [case]
    out = tmp_path / test_file.name
    out.write_text(yaml.safe_dump(spec, sort_keys=False))
    return out


@pytest.mark.parametrize("rule_file", RULE_FILES, ids=lambda p: p.name)
def test_promtool_check_rules(rule_file: Path) -> None:
    result = _run(binary("promtool"), "check", "rules", str(rule_file))
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_checks_the_benchmark_floor() -> None:
    """bench/floor_rules anchors the rules cost in docs/benchmarks.md; it must keep loading."""
    floor = REPO / "bench" / "floor_rules" / "proxy_pool.yml"
    result = _run(binary("promtool"), "check", "rules", str(floor))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("rule_file", RULE_FILES, ids=lambda p: p.name)
def test_vmalert_dry_run_loads(rule_file: Path) -> None:
    result = _run(binary("vmalert"), "-dryRun", f"-rule={rule_file}")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(("test_file", "index", "name"), _cases(),
                         ids=[f"{f.stem}::{n}" for f, _, n in _cases()])
def test_promtool_case(tmp_path: Path, test_file: Path, index: int, name: str) -> None:
    assert name, f"{test_file.name} case {index} has no name"
    case = _load(test_file)["tests"][index]
    result = _run(binary("promtool"), "test", "rules",
                  str(_single_case_file(tmp_path, test_file, case)))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("test_file", TEST_FILES, ids=lambda p: p.name)
def test_promtool_fails_on_a_wrong_value(tmp_path: Path, test_file: Path) -> None:
    """Proves the cases are checked at all: one expectation off by one (a sample's value,
    else a firing alert's label) must fail."""
    case = next(c for c in _load(test_file)["tests"]
                if c.get("promql_expr_test") or any(t["exp_alerts"] for t in c["alert_rule_test"]))
    if case.get("promql_expr_test"):
        sample = next(s for t in case["promql_expr_test"] for s in t.get("exp_samples") or [])
        sample["value"] += 1
    else:
        alert = next(a for t in case["alert_rule_test"] for a in t["exp_alerts"])
        alert["exp_labels"]["severity"] += "x"
    result = _run(binary("promtool"), "test", "rules",
                  str(_single_case_file(tmp_path, test_file, case)))
    assert result.returncode != 0
    assert "FAILED" in result.stdout + result.stderr


def test_every_group_has_a_test_file() -> None:
    groups = {g["name"] for g in _groups()}
    assert groups == {f.stem for f in TEST_FILES}


def test_case_names_are_unique_per_file() -> None:
    for test_file in TEST_FILES:
        names = [case.get("name") for case in _load(test_file)["tests"]]
        assert len(names) == len(set(names)), test_file.name


def test_every_rollup_the_bridge_reads_is_recorded() -> None:
    by_name: dict[str, list[dict[str, Any]]] = {}
    for rule in _rules():
        by_name.setdefault(rule["record"], []).append(rule)
    assert rollup_names() <= by_name.keys(), rollup_names() - by_name.keys()
    for field in FIELDS:
        rules = by_name[field.rollup]
        for label in field.matchers:
            assert all(f"({label}" in r["expr"] or f", {label}" in r["expr"] for r in rules), (
                f"{field.rollup} is not aggregated by {label}")
        if field.kind is Kind.STATE:
            assert all(field.state_label in r["labels"] for r in rules), field.rollup


def test_no_rule_invents_a_zero() -> None:
    for rule in _rules():
        expr = re.sub(r"\s+", "", rule["expr"])
        assert "vector(0)" not in expr, rule["record"]
        assert "absent(" not in expr, rule["record"]


def test_pool_rollups_name_their_source() -> None:
    for group in _groups():
        for rule in group["rules"]:
            if "record" not in rule:
                continue
            name = rule["record"]
            assert RECORD_NAME.match(name), name
            level = name.split(":", 1)[0]
            assert level in LEVELS.get(group["name"], (POOL_LEVEL,)), (group["name"], name)
            if level == POOL_LEVEL:
                assert (rule.get("labels") or {}).get("source") or DYNAMIC_SOURCE.search(
                    rule["expr"]), name


@pytest.mark.parametrize(("expr", "dynamic"), [
    ("max by (proxy_id, source) (x)", True),
    ("sum by (source) (x)", True),
    ('label_replace(count by (proxy_id) (x), "source", "self_declared", "", "")', True),
    ("sum by (proxy_id) (x)", False),
    ("sum by (proxy_id, sources) (x)", False),
    ('label_replace(x, "term", "queue", "source", "(.*)")', False),
])
def test_a_dynamic_source_is_recognised(expr: str, dynamic: bool) -> None:
    assert bool(DYNAMIC_SOURCE.search(expr)) is dynamic


@pytest.mark.parametrize("rule_file", RULE_FILES, ids=lambda p: p.name)
def test_every_rule_says_why_it_exists(rule_file: Path) -> None:
    """A rule is preceded by a comment, or by a rule of the same name that has one."""
    previous_line, previous_record = "", ""
    for line in rule_file.read_text().splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        match = re.match(r"- (?:record|alert): (\S+)", stripped)
        if match:
            record = match.group(1)
            assert previous_line.startswith("#") or record == previous_record, record
            previous_record = record
        previous_line = stripped


def test_the_fleet_series_is_written_after_every_rollup() -> None:
    """The Scheduler bridge's probe (bridge/queries.py) takes its timestamp for that of
    every rollup: it must be the last rule of their group, and read every other rollup of
    it, through data_quality or directly, so a Prometheus that evaluates independent
    rules at once still writes it last."""
    [group] = [g for g in _groups()
               if any(r.get("record") == "proxy_pool:data_quality" for r in g["rules"])]
    records = [r for r in group["rules"] if "record" in r]
    assert records[-1]["record"] == FLEET_SERIES
    reads = {r["record"]: set() for r in records}
    for r in records:
        reads[r["record"]] |= set(RECORDED.findall(r["expr"])) & set(reads)
    found, todo = set(), [FLEET_SERIES]
    while todo:
        for name in reads[todo.pop()] - found:
            found.add(name)
            todo.append(name)
    assert found == set(reads) - {FLEET_SERIES}, sorted(set(reads) - found)
