"""The compact summary and the heartbeat payload: the Scheduler bridge's bytes for
this pool, read with this pool's matcher only."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry

from harness.canned_prometheus import pool_series, series
from poolscope.bridge.app import Settings
from poolscope.bridge.summary import build_summaries, encode_json, parse_value
from poolscope.proxy_bridge.heartbeat import PUBLISHED_KEYS, heartbeat_payload
from poolscope.scheduler_bridge.app import create_app as scheduler_app
from tests.proxy_bridge.conftest import PID, MakeBridge, Serve
from tests.proxy_bridge.pool_data import CannedPool, Inst, raw_series
from tests.scheduler_bridge.conftest import FakeClock

OTHER = "hp_127.0.0.1:8002"


def _rollups() -> list:
    """Two pools, ours with a NaN, a measured zero and a missing field."""
    replaced = {"proxy_pool:requests:rate1m", "proxy_pool:cpu_utilization:max",
                "proxy_pool:inflight_requests:sum"}
    ours = [s for s in pool_series(PID, value="0.25", source="psutil")
            if s[0]["__name__"] not in replaced]
    ours.append(series("proxy_pool:cpu_utilization:max", PID, "NaN", "psutil"))
    ours.append(series("proxy_pool:inflight_requests:sum", PID, "0", "proxy_dispatch"))
    return [*ours, *pool_series(OTHER, value="7")]


def _prepare(canned: CannedPool) -> None:
    instances = [Inst("i-1"), Inst("i-2", idle_s=None)]
    canned.vector = [*_rollups(), *raw_series(PID, instances), *raw_series(OTHER, [Inst("o")])]
    canned.set_local(PID, instances)


async def test_summary_is_byte_for_byte_the_scheduler_bridges(
        canned: CannedPool, make_bridge: MakeBridge, serve: Serve, clock: FakeClock) -> None:
    _prepare(canned)
    scheduler = await serve(scheduler_app(Settings(backends=(canned.url,)),
                                          registry=CollectorRegistry(), clock=clock))
    proxy = await make_bridge(canned.url)
    expected = await scheduler.body(f"/v1/pool_resources/{PID}")
    assert await proxy.body("/debug/pool_resource") == expected
    assert await proxy.body("/v1/pool_resource/heartbeat_payload") == expected
    summary = await proxy.get("/debug/pool_resource")
    assert summary["proxy_id"] == PID
    assert summary["generated_at"] == round(clock.now, 3)
    assert summary["utilization"]["cpu_max"] is None  # NaN: not a measurement
    assert summary["load"]["inflight_total"] == 0  # a measured zero stays 0
    assert summary["load"]["qps_1m_total"] is None


async def test_only_this_pool_is_ever_queried(canned: CannedPool,
                                              make_bridge: MakeBridge) -> None:
    _prepare(canned)
    proxy = await make_bridge(canned.url, query_shards=3)
    await proxy.get("/debug/pool_resource")
    matcher = f'proxy_id="{PID}"'
    # 3 rollup shards, their timestamps and 4 local queries, at one evaluation time,
    # whatever the pool size.
    assert len(canned.queries) == 8
    assert len({at for _, at in canned.queries}) == 1
    for promql, _ in canned.queries:
        assert re.findall(r'proxy_id="[^"]*"', promql), promql
        assert set(re.findall(r'proxy_id="[^"]*"', promql)) == {matcher}, promql
    assert OTHER not in str(await proxy.get("/debug/pool_resource?detail=local"))


async def test_unknown_pool_is_404_pointing_at_the_diagnosis(canned: CannedPool,
                                                             make_bridge: MakeBridge) -> None:
    canned.vector = pool_series(OTHER)
    proxy = await make_bridge(canned.url)
    for path in ("/debug/pool_resource", "/v1/pool_resource/heartbeat_payload"):
        body = await proxy.get(path, status=404)
        assert "/debug/pool_resource_sources" in body["error"]


def test_heartbeat_payload_is_the_summary_with_every_published_key() -> None:
    samples = [(m, parse_value(v)) for m, v in pool_series(PID, value="2")]
    summary = build_summaries(samples, 1_700_000_000.0)[PID]
    payload = heartbeat_payload(summary)
    assert encode_json(payload) == encode_json(summary)
    assert payload is not summary and payload["load"] is not summary["load"]
    for key, subkeys in PUBLISHED_KEYS.items():
        assert key in payload
        for sub in subkeys:
            assert sub in payload[key], f"{key}.{sub}"


def test_a_consumer_of_the_published_keys_still_finds_its_keys_in_a_thinner_summary() -> None:
    thin = {"schema_version": 1, "proxy_id": PID, "load": None,
            "instances": {"total": 3, "idle": 1}}
    payload = heartbeat_payload(thin)
    assert payload["instances"] == {"total": 3, "idle": 1, "alive": None, "stale": None,
                                    "with_resource": None, "missing_resource": None}
    assert payload["load"]["inflight_total"] is None
    assert payload["generated_at"] is None
    assert payload["health"]["data_quality"] is None
    assert thin["load"] is None  # the caller's summary is not touched
