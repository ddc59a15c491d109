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
from scheduler_bridge.fields import FIELDS
from tests.support.cluster import demo_cluster
from tests.support.prometheus import Prometheus

pytestmark = pytest.mark.integration

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "scheduler_bridge" / "schema" /
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


@pytest.mark.parametrize("rollup", sorted(RAW))
def test_rollup_agrees_with_raw_series(prom: Prometheus, rollup: str) -> None:
    expr, inputs = RAW[rollup]
    stamped = prom.query(f"timestamp({rollup})")
    assert {s["metric"]["proxy_id"] for s in stamped} == {"pool-1", "pool-2"}
    at = float(stamped[0]["value"][1])
    rolled = value_at(prom, rollup, at)
    candidates = [value_at(prom, expr, cutoff) for cutoff in prom.cutoffs_seen_at(at, inputs)]
    assert any(rolled.keys() == raw.keys()
               and all(rolled[pool] == pytest.approx(v, rel=1e-9, abs=1e-12)
                       for pool, v in raw.items())
               for raw in candidates), (rolled, candidates)


def test_every_rollup_the_bridge_needs_exists(prom: Prometheus) -> None:
    # GPU rollups are absent on a machine without GPUs: that absence is the contract.
    expected = {f.rollup for f in FIELDS if "gpu" not in f.rollup}
    deadline = time.monotonic() + 60  # rate()-based rollups need a second scrape first
    while True:
        present = {s["metric"]["__name__"] for s in prom.query('{__name__=~"proxy_pool:.+"}')}
        if expected <= present or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert expected - present == set()
    assert not any("gpu_util" in name for name in present)


def test_scheduler_bridge_serves_both_pools_measured_or_null(cluster: Cluster,
                                                            prom: Prometheus) -> None:
    status, body = get_json(f"{cluster.scheduler_bridge_url}/debug/proxy_pool_resources")
    assert status == 200
    assert set(body["pools"]) == {"pool-1", "pool-2"}
    for pool_id, summary in body["pools"].items():
        jsonschema.validate(summary, SCHEMA)
        assert summary["proxy_id"] == pool_id
        assert summary["instances"]["total"] == 2
        assert summary["load"]["capacity"] == 16  # 2 Instances x --capacity 8
        assert summary["load"]["qps_1m_total"] > 0
        assert summary["utilization"]["gpu_util_avg"] is None  # no GPU here: null, not 0
        assert summary["utilization"]["cpu_avg"] is not None
        assert summary["metric_source"]["inflight"] == "proxy_dispatch"
        # A null GPU field means the pool's data can never be "complete".
        assert summary["health"]["data_quality"] == "partial"


def test_pools_follow_the_load_they_were_given(prom: Prometheus) -> None:
    # Pool 2 is sent twice pool 1's rate; over a minute that must show.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        qps = value_at(prom, "proxy_pool:requests:rate1m", time.time())
        if qps.get("pool-2", 0) > qps.get("pool-1", 0) * 1.3:
            break
        time.sleep(1)
    assert qps["pool-2"] > qps["pool-1"] * 1.3, qps


def test_sources_endpoint_explains_null_gpu_fields(cluster: Cluster, prom: Prometheus) -> None:
    status, body = get_json(f"{cluster.scheduler_bridge_url}/debug/pool_resource_sources")
    assert status == 200
    assert body["pools"] == 2
    fields = {f["path"]: f for f in body["fields"]}
    gpu = fields["utilization.gpu_util_avg"]
    assert gpu["wired"] == 0
    assert "GPU" in gpu["null_when"]
    assert fields["load.inflight_total"]["wired"] == 2
    assert fields["load.inflight_total"]["sources"] == {"proxy_dispatch": 2}


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
