"""The bridge's PromQL and parsing against a real Prometheus (no rules: the target
serves proxy_pool: series itself), read back through the typed client; and its cache
following the samples' own timestamps there."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from jsonschema import Draft202012Validator
from prometheus_client import CollectorRegistry

from harness.canned_prometheus import pool_series, series
from harness.polling import until
from harness.prometheus import running_prometheus, scrape_config
from harness.rollup_target import rollup_target
from poolscope.bridge.app import Settings
from poolscope.bridge.schema import pool_summary_schema
from poolscope.scheduler_bridge.app import create_app
from poolscope.scheduler_bridge.client import SchedulerBridgeClient

pytestmark = pytest.mark.integration


def _vector() -> list:
    partial = [s for s in pool_series("hp_127.0.0.1:8002", value="0")
               if s[0]["__name__"] not in {"proxy_pool:cpu_utilization:avg",
                                           "proxy_pool:requests:rate1m"}]
    partial.append(series("proxy_pool:cpu_utilization:avg", "hp_127.0.0.1:8002", "NaN",
                          "psutil"))
    return [*pool_series("hp_127.0.0.1:8001", value="1", source="psutil"), *partial]


async def test_bridge_over_real_prometheus(tmp_path: Path) -> None:
    async with rollup_target(_vector()) as target:
        with running_prometheus(tmp_path, [scrape_config("rollups", [target])],
                                rule_files=[]) as prom:
            await asyncio.to_thread(prom.wait_for, "proxy_pool:instances:count")
            # answer_within: a loaded box must not turn a slow read into a stale answer.
            app = create_app(Settings(backends=(prom.url,), cache_ttl_s=0.0, answer_within_s=30.0),
                             registry=CollectorRegistry())
            server = TestServer(app, host="127.0.0.1")
            await server.start_server()
            try:
                async with aiohttp.ClientSession() as session:
                    snap = await SchedulerBridgeClient(
                        str(server.make_url("")), session).snapshot()
                    raw = await (await session.get(
                        server.make_url("/debug/proxy_pool_resources"))).json()
            finally:
                await server.close()

    assert snap.stale is False
    assert sorted(snap.pools) == ["hp_127.0.0.1:8001", "hp_127.0.0.1:8002"]
    validator = Draft202012Validator(pool_summary_schema())
    for pool in raw["pools"].values():
        validator.validate(pool)

    full = snap.pools["hp_127.0.0.1:8001"]
    assert full.generated_at == snap.generated_at
    assert full.utilization.cpu_avg == pytest.approx(100.0)
    assert full.instances.total == 1
    assert full.health.data_quality == "complete"
    assert full.health.pool_admission_state == "accepting"
    assert full.metric_source.resource == "psutil"

    part = snap.pools["hp_127.0.0.1:8002"]
    assert part.utilization.cpu_avg is None  # NaN in Prometheus
    assert part.load.qps_1m_total is None  # absent
    assert part.load.inflight_total == 0  # a measured zero
    assert part.instances.total == 0
    assert part.health.data_quality == "partial"
    assert part.metric_quality.resource == "partial"


async def test_full_reads_follow_the_rollups_timestamps(tmp_path: Path) -> None:
    """Scraped every second, the rollups move every second; told they move every half
    second, the bridge probes in between, and reads in full only after a move."""
    async with rollup_target(_vector()) as target:
        with running_prometheus(tmp_path, [scrape_config("rollups", [target], "1s")],
                                rule_files=[]) as prom:
            await asyncio.to_thread(prom.wait_for, "proxy_pool:instances:count")
            registry = CollectorRegistry()
            app = create_app(Settings(backends=(prom.url,), cache_ttl_s=0.1,
                                      evaluation_interval_s=0.5, answer_within_s=30.0),
                             registry=registry)
            server = TestServer(app, host="127.0.0.1")
            await server.start_server()

            def count(name: str, **labels: str) -> float:
                return registry.get_sample_value(
                    f"poolscope_scheduler_bridge_{name}_total", labels) or 0.0

            served: set[float] = set()
            try:
                async with aiohttp.ClientSession() as session:
                    async def poll() -> float:
                        async with session.get(
                                server.make_url("/debug/proxy_pool_resources")) as resp:
                            doc = await resp.json()
                        assert doc["stale"] is False, doc
                        served.add(doc["generated_at"])
                        return count("refreshes", outcome="ok")

                    await until(poll, lambda reads: reads >= 3, "three full reads",
                                limit_s=60)
            finally:
                await server.close()

    moved = count("probes", outcome="moved")
    assert count("refreshes", outcome="ok") == 1 + moved  # none without a move
    assert count("probes", outcome="unchanged") >= 1
    assert count("probes", outcome="error") == count("refreshes", outcome="error") == 0
    assert len(served) == 1 + moved
