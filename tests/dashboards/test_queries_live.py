"""Every dashboard query against a real Prometheus fed by the demo cluster:
it parses, and it returns data, except GPU queries, which on a host without
GPUs must return nothing at all (absent, never a zero)."""

from __future__ import annotations

from typing import Any

import pytest

from dashboards import HERE
from harness.prometheus import Prometheus
from tests.dashboards.conftest import PROXY_IDS
from tests.dashboards.panels import DASHBOARD_FILES, Query, load, panels, queries, variable_queries

pytestmark = pytest.mark.integration

MEASURED = [q for q in queries() if not q.needs_gpu]
GPU = [q for q in queries() if q.needs_gpu]


def test_gpu_queries_are_recognised() -> None:
    # The split must not be vacuous: the pool and Instance dashboards have GPU rows.
    assert {q.dashboard for q in GPU} == {p.stem for p in DASHBOARD_FILES}
    assert len(MEASURED) > 3 * len(GPU)


@pytest.mark.parametrize("query", MEASURED, ids=lambda q: q.id)
def test_query_returns_data_for_the_demo_pools(prom: Prometheus, query: Query) -> None:
    # Rates and quantiles need a few scrapes of traffic; wait for them, then check.
    result = prom.wait_for(query.substituted(), timeout=45)
    pools = {s["metric"]["proxy_id"] for s in result if "proxy_id" in s["metric"]}
    assert pools <= PROXY_IDS


@pytest.mark.parametrize("query", GPU, ids=lambda q: q.id)
def test_gpu_query_parses_and_is_absent_without_gpus(prom: Prometheus, query: Query) -> None:
    # The host collector is fresh, so absence here is the GPU's, not a dead exporter's.
    prom.wait_for('poolscope_collector_success{collector="host"} == 1')
    assert prom.query(query.substituted()) == []


@pytest.mark.parametrize("query", variable_queries(), ids=lambda q: q.id)
def test_variable_offers_the_demo_values(prom: Prometheus, query: Query) -> None:
    values = {s["metric"].get(query.ref) for s in prom.wait_for(query.substituted())}
    expected = {
        # A single Prometheus: the pools' series are there, none with the label,
        # so "All" (`.*`) is the only choice and it matches them all.
        "region": {None}, "cluster": {None},
        "proxy_id": PROXY_IDS,
    }.get(query.ref, {f"{pool}-inst-{i}" for pool in PROXY_IDS for i in (1, 2)})
    assert values == expected


STATE_PANELS = [(path.stem, panel) for path in DASHBOARD_FILES for panel in panels(load(path))
                if panel["type"] == "state-timeline"]


@pytest.mark.parametrize("dashboard, panel", STATE_PANELS,
                         ids=[f"{d}:{p['title']}" for d, p in STATE_PANELS])
def test_state_panels_name_a_state_for_every_value(prom: Prometheus, dashboard: str,
                                                   panel: dict[str, Any]) -> None:
    """A value without a mapping would show a bare number instead of a state."""
    [mapping] = panel["fieldConfig"]["defaults"]["mappings"]
    named = {float(v) for v in mapping["options"]}
    query = Query(dashboard, panel["title"], "A", panel["targets"][0]["expr"])
    if query.needs_gpu:
        pytest.skip("no GPU on this host: the GPU query is checked absent elsewhere")
    values = {float(s["value"][1]) for s in prom.wait_for(query.substituted())}
    assert values <= named


def test_pool_state_codes_agree_with_the_one_hot_rules(prom: Prometheus) -> None:
    fleet = load(HERE / "poolscope-fleet.json")
    [panel] = [p for p in panels(fleet) if p["title"] == "Data quality"]
    [mapping] = panel["fieldConfig"]["defaults"]["mappings"]
    expr = Query("fleet", "Data quality", "A", panel["targets"][0]["expr"]).substituted()
    # Both reads at the timestamp of a stored evaluation, so a state change in between
    # cannot split them.
    at = max(float(s["value"][1]) for s in prom.wait_for("timestamp(proxy_pool:data_quality)"))
    coded = {s["metric"]["proxy_id"]: mapping["options"][s["value"][1]]["text"]
             for s in prom.query(expr, at=at)}
    truth = {s["metric"]["proxy_id"]: s["metric"]["quality"]
             for s in prom.query("proxy_pool:data_quality == 1", at=at)}
    assert coded == truth
    assert coded.keys() == PROXY_IDS
