"""The committed Grafana dashboards, read as files: importable as-is, no
hard-coded datasource, nothing that turns an absent value into 0, and every
metric they name exists."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import Any

import pytest

from dashboards.__main__ import main as generate
from dashboards.grafana import DATASOURCE, NO_DATA, SCHEMA_VERSION
from tests.dashboards.panels import (
    DASHBOARD_FILES,
    PROMETHEUS_OWN,
    REPO,
    STABLE_ROLLUPS,
    Query,
    catalog_names,
    load,
    metric_names,
    panels,
    queries,
    rule_names,
    variable_queries,
)
from tests.support.chromium import png_size

BY_NAME = {path.stem: path for path in DASHBOARD_FILES}
CONSOLE = REPO / "dashboards" / "consoles" / "poolscope.html"
SCREENSHOT = REPO / "docs" / "screenshots" / "console-healthy.png"


def walk(node: Any, path: str = "") -> Iterator[tuple[str, str, Any]]:
    """Every (path, key, value) of a JSON document."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield path, key, value
            yield from walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from walk(value, f"{path}[{i}]")


# `or` with a bare number as its right-hand side (`x or on () 0`); a number
# that scales a series (`or 2 * (x == 1)`) is a measured value, not a fallback.
_OR_CONSTANT = re.compile(r"\bor\b\s*(?:on\s*\([^)]*\)\s*)?\(?\s*\d[\d.]*\s*(?:\)|$)")


def zero_fills(dashboard: dict[str, Any]) -> list[str]:
    """Everything in a dashboard that would show an unknown value as 0."""
    found = []
    for path, key, value in walk(dashboard):
        where = f"{path}.{key}"
        if key == "expr" and ("vector(" in value or _OR_CONSTANT.search(value)):
            found.append(f"{where}: constant fallback in {value!r}")
        if key == "nullValueMode" or (isinstance(value, str) and "null as zero" in value):
            found.append(f"{where}: null value mode {value!r}")
        if key == "noValue" and value != NO_DATA:
            found.append(f"{where}: noValue {value!r}")
        if key == "spanNulls" and value is not False:
            found.append(f"{where}: spanNulls {value!r} draws over gaps")
        if key == "mappings":
            found += [f"{where}: maps {m['options'].get('match')!r}" for m in value
                      if m.get("type") == "special"]
        if key == "transformations":
            found += [f"{where}: {t['id']}" for t in value if "fill" in t.get("id", "").lower()]
    return found


@pytest.fixture(params=sorted(BY_NAME), scope="module")
def dashboard(request: pytest.FixtureRequest) -> dict[str, Any]:
    return load(BY_NAME[request.param])


def test_committed_json_is_what_the_generator_makes() -> None:
    assert sorted(BY_NAME) == ["poolscope-fleet", "poolscope-instance", "poolscope-pool"]
    assert generate(["--check"]) == 0, "run `python -m dashboards` and commit the result"


def test_dashboard_imports_into_any_grafana(dashboard: dict[str, Any]) -> None:
    assert dashboard["id"] is None
    assert re.fullmatch(r"poolscope-[a-z]+", dashboard["uid"])
    assert dashboard["schemaVersion"] == SCHEMA_VERSION
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    pool = variables["proxy_id"]
    where = 'region=~"$region",cluster=~"$cluster"'
    assert pool["query"] == f"label_values(proxy_pool:instances:count{{{where}}}, proxy_id)"
    assert pool["multi"] is pool["includeAll"] is True
    assert pool["datasource"] == DATASOURCE


def test_instance_dashboard_selects_one_instance_of_the_chosen_pools() -> None:
    variables = {v["name"]: v for v in load(BY_NAME["poolscope-instance"])["templating"]["list"]}
    assert 'proxy_id=~"$proxy_id"' in variables["instance_id"]["query"]
    assert variables["instance_id"]["multi"] is False
    for query in queries():
        if query.dashboard == "poolscope-instance":
            assert 'instance_id="$instance_id"' in query.expr, query.id


def test_no_datasource_uid_is_hard_coded(dashboard: dict[str, Any]) -> None:
    # The built-in annotation reads Grafana's own store, which every Grafana has
    # under that fixed name.
    [built_in] = dashboard["annotations"]["list"]
    assert built_in["datasource"] == {"type": "grafana", "uid": "-- Grafana --"}
    refs = [(path, value) for path, key, value in walk(dashboard)
            if key == "datasource" and not path.startswith(".annotations")]
    assert len(refs) > len(dashboard["panels"])  # panels and their targets
    assert all(value == DATASOURCE for _, value in refs), refs
    uids = [path for path, key, _ in walk(dashboard) if key == "uid" and path]
    assert all(path.endswith(".datasource") for path in uids), uids


def test_export_envelope_names_what_the_dashboard_needs(dashboard: dict[str, Any]) -> None:
    """What Grafana's "Export for sharing externally" writes, so that an import
    says which plugins are missing before it shows broken panels."""
    assert dashboard["__inputs"] == []  # the datasource is a variable, chosen after import
    needed = {(r["type"], r["id"]) for r in dashboard["__requires"]}
    kinds = {p["type"] for p in panels(dashboard)} - {"row"}
    assert needed == {("grafana", "grafana"), ("datasource", "prometheus")} | {
        ("panel", kind) for kind in kinds}
    [built_in] = [a for a in dashboard["annotations"]["list"] if a.get("builtIn") == 1]
    assert built_in["name"] == "Annotations & Alerts"


def test_every_selector_can_be_narrowed_to_a_region_and_cluster(
        dashboard: dict[str, Any]) -> None:
    """The federated global Prometheus holds every region's pools: each
    series a query selects must take the region and cluster chosen."""
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    for name in ("region", "cluster"):
        assert variables[name]["multi"] is variables[name]["includeAll"] is True
        assert variables[name]["allValue"] == ".*"  # matches series without the label
    narrowed = [Query(dashboard["uid"], p["title"], t["refId"], t["expr"])
                for p in panels(dashboard) for t in p.get("targets", [])]
    narrowed += [q for q in variable_queries() if q.dashboard == dashboard["uid"]
                 and q.panel not in ("$region", "$cluster")]
    assert 'region=~"$region"' in variables["cluster"]["query"]
    for query in narrowed:
        for metric in query.metrics:
            uses = re.findall(rf"(?<![\w:]){re.escape(metric)}(\{{[^}}]*\}})?", query.expr)
            for matchers in uses:
                assert 'region=~"$region"' in matchers, (query.id, metric)
                assert 'cluster=~"$cluster"' in matchers, (query.id, metric)


def test_no_axis_mixes_tokens_with_requests(dashboard: dict[str, Any]) -> None:
    """Tokens/s run hundreds of times requests/s: on one axis the requests
    line lies flat at 0."""
    token_panels = 0
    for p in panels(dashboard):
        reads_tokens = {"tokens" in name for t in p.get("targets", [])
                        for name in metric_names(t["expr"])}
        assert len(reads_tokens) <= 1, f"{p['title']} mixes tokens with other series"
        if reads_tokens == {True}:
            token_panels += 1
            assert p["fieldConfig"]["defaults"]["unit"].endswith("tokens/s"), p["title"]
    assert token_panels == (dashboard["uid"] == "poolscope-instance")


def test_detail_rows_are_collapsed_and_the_headline_is_not(dashboard: dict[str, Any]) -> None:
    rows = [p for p in dashboard["panels"] if p["type"] == "row"]
    assert not rows[0]["collapsed"] and rows[0]["panels"] == []
    collapsed = [r for r in rows if r["collapsed"]]
    assert collapsed and all(r["panels"] for r in collapsed)


def grids(dashboard: dict[str, Any]) -> Iterator[list[dict[str, Any]]]:
    """The panels that share one grid: the dashboard as it opens, and each
    collapsed row's panels as the row opens (Grafana moves what follows down)."""
    yield dashboard["panels"]
    for row in dashboard["panels"]:
        if row.get("collapsed"):
            assert min(p["gridPos"]["y"] for p in row["panels"]) == row["gridPos"]["y"] + 1
            yield row["panels"]


def test_panels_fit_the_grid_without_overlap(dashboard: dict[str, Any]) -> None:
    all_panels = list(panels(dashboard))
    assert len({p["id"] for p in all_panels}) == len(all_panels)
    for grid in grids(dashboard):
        cells: dict[tuple[int, int], str] = {}
        for p in grid:
            g = p["gridPos"]
            assert g["x"] + g["w"] <= 24, p["title"]
            for x in range(g["x"], g["x"] + g["w"]):
                for y in range(g["y"], g["y"] + g["h"]):
                    assert (x, y) not in cells, f"{p['title']} overlaps {cells[(x, y)]}"
                    cells[(x, y)] = p["title"]


def test_every_panel_queries_something_and_says_why(dashboard: dict[str, Any]) -> None:
    for p in panels(dashboard):
        if p["type"] != "row":
            assert p["targets"] and p["description"], p["title"]


def test_nothing_turns_unknown_into_zero(dashboard: dict[str, Any]) -> None:
    assert zero_fills(dashboard) == []


@pytest.mark.parametrize("doctor", [
    lambda p: p["targets"][0].update(expr=p["targets"][0]["expr"] + " or vector(0)"),
    lambda p: p["targets"][0].update(expr=p["targets"][0]["expr"] + " or on () 0"),
    lambda p: p["fieldConfig"]["defaults"].update(noValue="0"),
    lambda p: p.update(nullValueMode="null as zero"),
    lambda p: p["fieldConfig"]["defaults"].update(mappings=[
        {"type": "special", "options": {"match": "null", "result": {"text": "0"}}}]),
    lambda p: p.update(transformations=[{"id": "fillZero", "options": {}}]),
], ids=["or-vector", "or-constant", "noValue", "nullValueMode", "null-mapping", "transform"])
def test_zero_fill_check_catches_each_kind(doctor: Any) -> None:
    doctored = copy.deepcopy(load(BY_NAME["poolscope-fleet"]))
    doctor(next(p for p in doctored["panels"] if p["type"] == "timeseries"))
    assert len(zero_fills(doctored)) == 1


def test_metric_names_are_read_out_of_promql() -> None:
    expr = ('histogram_quantile(0.95, sum by (queue, le) (rate(a_bucket{q="x y",b=~"$v"}[5m])))'
            ' / on (proxy_id) group_left (state) b:c:sum offset 1m > bool 2e3 or up')
    assert metric_names(expr) == {"a_bucket", "b:c:sum", "up"}


def all_queries() -> list[Query]:
    return queries() + variable_queries()


@pytest.mark.parametrize("query", all_queries(), ids=lambda q: q.id)
def test_every_metric_named_exists(query: Query) -> None:
    assert query.metrics, "no metric found: the query or the name extraction is wrong"
    assert query.metrics - (catalog_names() | rule_names() | PROMETHEUS_OWN) == set()
    rollups = {n for n in query.metrics if ":" in n}
    assert rollups <= STABLE_ROLLUPS, "read raw exporter series, not instance:* records"


def test_console_reads_only_stable_rollups() -> None:
    names = set(re.findall(r"proxy_pool:[\w:]+", CONSOLE.read_text()))
    assert {"proxy_pool:load:ratio", "proxy_pool:data_quality"} <= names
    assert names <= STABLE_ROLLUPS & rule_names()


def test_console_screenshot_is_kept_in_docs() -> None:
    width, height = png_size(SCREENSHOT)
    assert width >= 800 and height >= 200
