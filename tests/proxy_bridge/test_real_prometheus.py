"""The Proxy bridge over a real Prometheus running the real rules/, scraping the demo's
Proxy (with its Proxy exporter) and real Instance exporters in front of simulated
engines: same bytes as the Scheduler bridge, and local detail that matches the system."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from deploy.demo.cluster import Cluster
from harness.cluster import demo_cluster
from harness.prometheus import Prometheus
from poolscope.bridge.app import Settings
from poolscope.contract.catalog import HOST_NETWORK_RECEIVE, HOST_NETWORK_TRANSMIT
from poolscope.proxy_bridge.app import create_app
from poolscope.scheduler_bridge.app import create_app as scheduler_app
from tests.proxy_bridge.conftest import Serve
from tests.scheduler_bridge.conftest import FakeClock

pytestmark = pytest.mark.integration
POOL = "pool-1"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with demo_cluster(tmp_path_factory.mktemp("demo"), proxies=1, instances=2, rate=4.0) as c:
        prom = Prometheus(c.prometheus_url, c.workdir)
        # The test reads two seconds back: by then QPS must have its window covered,
        # every rule group (not only the load one) must have run, and each Instance's
        # network counters (rated one by one in the local view) must have been
        # scraped for over a minute before that instant.
        for ready in ("proxy_pool:requests:rate1m{pool} offset 2s > 0",
                      "proxy_pool:instances_with_resource:count{pool} offset 2s == 2",
                      "proxy_pool:resource_freshness_seconds:max{pool} offset 2s",
                      *(f"count(count by (instance_id) ({counter}{{pool}} offset 62s)) == 2"
                        for counter in (HOST_NETWORK_RECEIVE.name, HOST_NETWORK_TRANSMIT.name))):
            prom.wait_for(ready.format(pool=f'{{proxy_id="{POOL}"}}'), timeout=90)
        yield c


async def test_real_stack(cluster: Cluster, serve: Serve) -> None:
    # Both bridges evaluate at the same instant, two seconds back (as the fixture
    # waited) so every scrape and evaluation is in, even on a busy machine.
    clock = FakeClock(round(time.time() - 2.0, 3))
    # A clock held in the past is what the bridges refuse from a backend; here it is
    # the point, so the skew allowed covers the test's own run time.
    settings = Settings(backends=(cluster.prometheus_url,), cache_ttl_s=3600.0,
                        max_clock_skew_s=300.0)
    scheduler = await serve(scheduler_app(settings, registry=CollectorRegistry(), clock=clock))
    proxy = await serve(create_app(POOL, settings, registry=CollectorRegistry(), clock=clock))

    expected = await scheduler.body(f"/v1/pool_resources/{POOL}")
    assert await proxy.body("/debug/pool_resource") == expected
    assert await proxy.body("/v1/pool_resource/heartbeat_payload") == expected
    summary = await proxy.get("/debug/pool_resource")
    assert summary["instances"]["total"] == 2 and summary["load"]["capacity"] == 16

    local = await proxy.get("/debug/pool_resource?detail=local")
    assert local["generated_at"] == summary["generated_at"]
    assert local["proxy"]["reporting"] is True
    assert [i["instance_id"] for i in local["instances"]] == ["pool-1-inst-1", "pool-1-inst-2"]
    for inst in local["instances"]:
        assert inst["registered"] is True and inst["alive"] is True
        assert 0 <= inst["cpu_percent"] <= 100
        assert 0 < inst["memory_used_ratio"] < 1
        assert inst["resource_freshness_s"] < 15
        # Computed in the same query as the freshness, yet a figure of their own.
        for rate in ("network_rx_mbps", "network_tx_mbps"):
            assert isinstance(inst[rate], float) and inst[rate] >= 0, (rate, inst[rate])
        assert inst["engine"]["source"] == "engine:vllm"
        assert inst["engine"]["kv_cache_usage_ratio"] is not None
        assert inst["capacity"] == {"value": 8, "source": "configured"}
        assert inst["proxy_inflight"] is not None
        assert inst["admission_state"] in ("accepting", "degraded", "saturated")
        assert inst["collectors"]["host"]["success"] is True
    for name in ("prepare", "ready"):
        assert local["queues"][name]["capacity"] == 64
        assert local["queues"][name]["depth"] is not None

    sources = {f["path"]: f for f in (await proxy.get("/debug/pool_resource_sources"))["fields"]}
    assert sources["load.inflight_total"]["wired"] is True
    assert sources["load.queue_pressure"]["measured"] is True  # --prepare-capacity 64
    _gpu_is_explained(local["instances"], sources["utilization.gpu_util_avg"])


def _gpu_is_explained(instances: list[dict[str, Any]], gpu_field: dict[str, Any]) -> None:
    """Without an NVIDIA driver (CI, this sandbox) GPU data is absent, the gpu collector
    is not failing, and the null says why; with a driver, measured."""
    if all(i["collectors"]["gpu"]["success"] is None for i in instances):
        for inst in instances:
            assert inst["gpus"] == [] and inst["gpu_devices"] is None
            assert inst["collectors"]["gpu"]["reasons"] == []  # no error counted
        assert gpu_field["value"] is None
        assert [r["code"] for r in gpu_field["null_reasons"]] == ["no_gpu"]
        assert "no GPU data" in gpu_field["null_reason"]
    else:
        assert all(i["collectors"]["gpu"]["success"] is True for i in instances)
        assert all(i["gpu_devices"] is not None for i in instances)


