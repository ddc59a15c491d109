"""The whole stack, for real: demo cluster, Prometheus with the project's rules,
the Scheduler bridge. What the Scheduler is served must agree with the raw
series it was rolled up from, and what is not measured must be null."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from deploy.demo.cluster import Cluster
from harness.cluster import demo_cluster
from harness.polling import eventually
from harness.prometheus import Prometheus
from poolscope.contract.fields import FIELDS

pytestmark = pytest.mark.integration

POOLS = {"pool-1", "pool-2"}
# How long a check may retry over later evaluations and bridge refreshes: on a busy
# machine one slow scrape leaves a series out of an evaluation, which is noise, not a
# fault; a wrong rule or field fails every try.
SETTLE_S = 30

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "bridge" / "schema" /
                     "pool_summary.schema.json").read_text())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with demo_cluster(tmp_path_factory.mktemp("demo"), proxies=2, instances=2, rate=3.0) as c:
        yield c


@pytest.fixture(scope="module")
def prom(cluster: Cluster) -> Prometheus:
    prom = Prometheus(cluster.prometheus_url, cluster.workdir)
    # Settled: both Instances of both pools registered with fresh host data (the
    # Proxies start with empty registries), a CPU reading (it needs two host
    # samples), and QPS with two counter samples in its window and traffic behind it.
    prom.wait_for("count(proxy_pool:instances_with_resource:count == 2) == 2", timeout=90)
    for rollup in RAW:
        prom.wait_for(f"count({rollup}) == 2", timeout=90)
    prom.wait_for("count(proxy_pool:requests:rate1m > 0) == 2", timeout=90)
    return prom


def get_json(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def value_at(prom: Prometheus, promql: str, at: float) -> dict[str, float]:
    return {s["metric"].get("proxy_id", ""): float(s["value"][1])
            for s in prom.query(promql, at=at)}


# Each rollup against the raw expression it stands for, evaluated at the very
# timestamp Prometheus stored the rollup with, and the raw series it reads.
RAW = {
    # A Proxy whose collector read an empty registry counts a measured 0; the
    # demo's Proxies start empty, so that branch is live for the first seconds.
    "proxy_pool:instances:count": (
        "count by (proxy_id) (poolscope_proxy_instance_registered == 1)"
        ' or on (proxy_id) 0 * group by (proxy_id)'
        ' (poolscope_proxy_collector_success{collector="proxy"} == 1)',
        ("poolscope_proxy_instance_registered", "poolscope_proxy_collector_success")),
    "proxy_pool:inflight_requests:sum": (
        "sum by (proxy_id) (poolscope_proxy_instance_inflight_requests)",
        ("poolscope_proxy_instance_inflight_requests",)),
    # The exporters serve fresh host samples only, so the max is over what is scraped.
    "proxy_pool:cpu_utilization:max": (
        "max by (proxy_id) (poolscope_host_cpu_utilization_ratio)",
        ("poolscope_host_cpu_utilization_ratio",)),
    "proxy_pool:requests:rate1m": ("sum by (proxy_id) (rate(poolscope_proxy_requests_total[1m]))",
                                   ("poolscope_proxy_requests_total",)),
}


# The `source` a Proxy-side rollup carries while it reads the Proxy's own series. In
# an evaluation where the Proxy's scrape was slow (its series stale) the pool's
# rollup is absent or on another source: nothing of the Proxy's to compare with.
PROXY_SOURCE = {
    "proxy_pool:instances:count": "proxy_registry",
    "proxy_pool:inflight_requests:sum": "proxy_dispatch",
    "proxy_pool:requests:rate1m": "proxy_dispatch",
}


def disagreements(prom: Prometheus, rollup: str) -> dict[str, Any]:
    """Per pool, what keeps the rollup's latest stored evaluation from matching its raw
    expression as that evaluation may have seen the inputs; empty when all agree."""
    expr, inputs = RAW[rollup]
    stamped = {s["metric"]["proxy_id"]: s for s in prom.query(f"timestamp({rollup})")}
    out: dict[str, Any] = {pool: "no rollup" for pool in POOLS - stamped.keys()}
    out |= {pool: "not a pool of the demo" for pool in stamped.keys() - POOLS}
    for pool in sorted(POOLS & stamped.keys()):
        source = stamped[pool]["metric"].get("source")
        if rollup in PROXY_SOURCE and source != PROXY_SOURCE[rollup]:
            out[pool] = f"source {source}: the Proxy's series missed this evaluation"
            continue
        at = float(stamped[pool]["value"][1])
        series = ",".join(f'{k}="{v}"' for k, v in sorted(stamped[pool]["metric"].items()))
        rolled = value_at(prom, f"{rollup}{{{series}}}", at).get(pool)
        raw = [value_at(prom, expr, cutoff).get(pool)
               for cutoff in prom.cutoffs_seen_at(at, inputs)]
        if rolled is None or not any(
                v is not None and rolled == pytest.approx(v, rel=1e-9, abs=1e-12) for v in raw):
            out[pool] = {"at": at, "rolled": rolled, "raw at cutoffs": raw}
    return out


@pytest.mark.parametrize("rollup", sorted(RAW))
def test_rollup_agrees_with_raw_series(prom: Prometheus, rollup: str) -> None:
    # One evaluation is compared at a time, pool by pool, at the latest timestamp
    # Prometheus stored it with. The cutoffs assume scrapes land in the order they
    # started, which a busy machine breaks now and then, and a slow scrape leaves a
    # Proxy-side input out (a fallback source): retry over later evaluations.
    eventually(lambda: disagreements(prom, rollup), lambda d: d == {}, SETTLE_S,
               f"{rollup} agrees with its raw series")


def test_every_rollup_the_bridge_needs_exists(prom: Prometheus) -> None:
    # GPU rollups are absent on a machine without GPUs: that absence is the contract.
    expected = {f.rollup for f in FIELDS if "gpu" not in f.rollup}
    # 60 s: rate()-based rollups need a second scrape first.
    present = eventually(
        lambda: {s["metric"]["__name__"] for s in prom.query('{__name__=~"proxy_pool:.+"}')},
        lambda names: expected <= names, 60, "every rollup the bridge needs")
    assert not any("gpu_util" in name for name in present)


def test_scheduler_bridge_serves_both_pools_measured_or_null(cluster: Cluster,
                                                            prom: Prometheus) -> None:
    def problems(result: tuple[int, Any]) -> dict[str, Any]:
        status, body = result
        if status != 200 or set(body["pools"]) != POOLS:
            return {"status": status, "pools": sorted(body.get("pools", ()))}
        wrong = {}
        for pool_id, s in body["pools"].items():
            checks = {
                "proxy_id": s["proxy_id"] == pool_id,
                "instances.total": s["instances"]["total"] == 2,
                "load.capacity": s["load"]["capacity"] == 16,  # 2 Instances x --capacity 8
                "load.qps_1m_total": (s["load"]["qps_1m_total"] or 0) > 0,
                "utilization.gpu_util_avg": s["utilization"]["gpu_util_avg"] is None,  # not 0
                "utilization.cpu_avg": s["utilization"]["cpu_avg"] is not None,
                "metric_source.inflight": s["metric_source"]["inflight"] == "proxy_dispatch",
                # A null GPU field means the pool's data can never be "complete".
                "health.data_quality": s["health"]["data_quality"] == "partial",
            }
            if not all(checks.values()):
                wrong[pool_id] = {"failing": [k for k, ok in checks.items() if not ok],
                                  "summary": s}
        return wrong

    def served() -> tuple[dict[str, Any], Any]:
        result = get_json(f"{cluster.scheduler_bridge_url}/debug/proxy_pool_resources")
        return problems(result), result[1]

    # Each field is its own rollup, and a slow scrape of a Proxy or an exporter
    # leaves a field null or on a fallback source for an evaluation: wait for one
    # answer where every field of both pools holds. A wrong one fails every answer.
    _, body = eventually(served, lambda t: t[0] == {}, SETTLE_S,
                         "both pools served, measured or null")
    for summary in body["pools"].values():
        jsonschema.validate(summary, SCHEMA)


def test_pools_follow_the_load_they_were_given(prom: Prometheus) -> None:
    # Pool 2 is sent twice pool 1's rate; over a minute that must show.
    eventually(lambda: value_at(prom, "proxy_pool:requests:rate1m", time.time()),
               lambda qps: qps.get("pool-2", 0) > qps.get("pool-1", 0) * 1.3, 60,
               "pool 2's rate well above pool 1's", every=1)


def test_sources_endpoint_explains_null_gpu_fields(cluster: Cluster, prom: Prometheus) -> None:
    def inflight(result: tuple[int, Any]) -> dict[str, Any] | None:
        status, body = result
        if status != 200 or body["pools"] != 2:
            return None
        return next(f for f in body["fields"] if f["path"] == "load.inflight_total")

    # Both pools' inflight from their Proxies: in an evaluation where a Proxy's scrape
    # was slow, its pool's inflight is absent (or on another source) for a moment.
    _, body = eventually(
        lambda: get_json(f"{cluster.scheduler_bridge_url}/debug/pool_resource_sources"),
        lambda r: (f := inflight(r)) is not None and f["wired"] == 2
        and f["sources"] == {"proxy_dispatch": 2}, SETTLE_S,
        "both pools' inflight wired to their Proxies")
    fields = {f["path"]: f for f in body["fields"]}
    gpu = fields["utilization.gpu_util_avg"]
    assert gpu["wired"] == 0
    assert "GPU" in gpu["null_when"]


def test_proxy_bridge_serves_its_pool_and_the_local_detail(cluster: Cluster,
                                                          prom: Prometheus) -> None:
    pool = cluster.pools[0]
    status, summary = get_json(f"{pool.bridge_url}/debug/pool_resource")
    assert status == 200
    jsonschema.validate(summary, SCHEMA)
    assert summary["proxy_id"] == pool.proxy_id
    _, scheduler = get_json(f"{cluster.scheduler_bridge_url}/v1/pool_resources/{pool.proxy_id}")
    assert summary.keys() == scheduler.keys()
    status, local = get_json(f"{pool.bridge_url}/debug/pool_resource?detail=local")
    assert status == 200
    assert local == local | {"proxy_id": pool.proxy_id}
    assert sorted(i["instance_id"] for i in local["instances"]) == [
        f"{pool.proxy_id}-inst-1", f"{pool.proxy_id}-inst-2"]


def test_no_alert_is_pending_on_the_healthy_gpu_less_demo(prom: Prometheus) -> None:
    """rules/alerts.yml runs here too, on real exporters without GPUs: once the stack has
    settled none is pending or firing (`ALERTS` holds both states) but the Watchdog,
    which always fires, so none would page anyone about a healthy, GPU-less fleet.
    (promtool's fleets in tests/rules cover the windows, which are minutes; this covers
    the real series' shapes.)"""
    eventually(lambda: prom.query('ALERTS{alertname!="PoolscopeWatchdog"}'),
               lambda alerts: alerts == [], SETTLE_S,
               "no alert but the Watchdog pending or firing on the healthy demo")
