"""The bridge over HTTP against a canned Prometheus: what it serves and what it asks."""

from __future__ import annotations

import asyncio
import re
import urllib.parse
import weakref

import pytest
from jsonschema import Draft202012Validator

from harness.canned_prometheus import CannedPrometheus, Series, pool_series, series
from harness.polling import until
from harness.prometheus import free_port
from poolscope.bridge.app import CACHE
from poolscope.bridge.cache import RETIRE_AFTER_S
from poolscope.bridge.queries import EVALUATED_QUERY, FLEET_EVALUATED_QUERY, SNAPSHOT_QUERY
from poolscope.bridge.schema import pool_summary_schema
from poolscope.contract.fields import DATA_QUALITY_PATH, FIELDS
from poolscope.service.auth import Access
from poolscope.service.web import Exposure
from tests.scheduler_bridge.conftest import Bridge, FakeClock, MakeBridge, aged

POOLS = "/debug/proxy_pool_resources"
# One selector, its positive name matcher inside proxy_pool: (and, for the last shard, a
# negative one): nothing finer than a rollup can be selected.
ONLY_ROLLUPS = re.compile(r'\{__name__=~"proxy_pool:[^"]*"(,__name__!~"proxy_pool:[^"]*")?\}')
VALIDATOR = Draft202012Validator(pool_summary_schema())


def assert_only_rollups(prom: CannedPrometheus) -> None:
    assert prom.rollup_queries, "the bridge sent no query"
    for promql, _ in prom.rollup_queries:
        assert ONLY_ROLLUPS.fullmatch(promql), promql
    # ... and with each refresh, once, when the rules wrote them.
    assert [at for q, at in prom.queries if q == FLEET_EVALUATED_QUERY] == sorted(
        {at for _, at in prom.rollup_queries})


async def get_json(bridge: Bridge, path: str, status: int = 200) -> dict:
    resp = await bridge.http.get(path)
    assert resp.status == status, await resp.text()
    assert resp.content_type == "application/json"
    return await resp.json()


async def test_every_pool_valid_at_one_evaluation_time(canned: CannedPrometheus,
                                                       make_bridge: MakeBridge,
                                                       clock: FakeClock) -> None:
    canned.vector = [*pool_series("hp_127.0.0.1:8001"), *pool_series("b", value="0")]
    bridge = await make_bridge(canned.url)
    doc = await get_json(bridge, POOLS)
    assert doc["schema_version"] == 1
    assert doc["generated_at"] == round(clock.now, 3)
    assert doc["stale"] is False
    assert sorted(doc["pools"]) == ["b", "hp_127.0.0.1:8001"]
    for pool in doc["pools"].values():
        VALIDATOR.validate(pool)
        assert pool["generated_at"] == doc["generated_at"]
    assert canned.rollup_queries == [(SNAPSHOT_QUERY, f"{clock.now:.3f}")]
    assert_only_rollups(canned)


async def test_each_refresh_is_one_query_at_its_own_time(canned: CannedPrometheus,
                                                         make_bridge: MakeBridge,
                                                         clock: FakeClock) -> None:
    canned.vector = pool_series("a")
    bridge = await make_bridge(canned.url, cache_ttl_s=0.0)
    seen = []
    for path in (POOLS, "/v1/pool_resources/a", "/debug/pool_resource_sources", "/readyz"):
        clock.now += 0.5
        doc = await get_json(bridge, path)
        seen.append(doc.get("generated_at"))
    assert [at for _, at in canned.rollup_queries] == [
        f"{clock.now - 0.5 * k:.3f}" for k in (3, 2, 1, 0)]
    assert seen[:3] == [float(at) for _, at in canned.rollup_queries[:3]]
    assert_only_rollups(canned)


async def test_the_probe_reads_the_fleet_series_else_every_pools_data_quality(
        canned: CannedPrometheus, make_bridge: MakeBridge, clock: FakeClock) -> None:
    """One sample tells when the rules last ran, in a full read and in a probe; rules
    from before that series have only data_quality to ask, and the snapshot's age is
    right either way."""
    canned.vector = pool_series("a")
    canned.rollups_age_s = 2.0
    for fleet_series, asked in ((True, [FLEET_EVALUATED_QUERY]),
                                (False, [FLEET_EVALUATED_QUERY, EVALUATED_QUERY])):
        canned.fleet_series = fleet_series
        canned.queries.clear()
        bridge = await make_bridge(canned.url)
        assert (await aged(bridge, POOLS))[1] == pytest.approx(2.0)
        clock.now += 10  # the rules are due: a probe, which finds them moved, then a read
        assert (await aged(bridge, POOLS))[1] == pytest.approx(2.0)
        probes = [q for q, _ in canned.queries
                  if q in (FLEET_EVALUATED_QUERY, EVALUATED_QUERY)]
        assert probes == asked * 3, fleet_series
        assert len(canned.rollup_queries) == 2


async def test_nan_is_null_and_zero_is_zero_end_to_end(canned: CannedPrometheus,
                                                       make_bridge: MakeBridge) -> None:
    canned.vector = [series("proxy_pool:cpu_utilization:avg", "a", "NaN", "psutil"),
                     series("proxy_pool:inflight_requests:sum", "a", "0", "proxy_dispatch")]
    bridge = await make_bridge(canned.url)
    pool = (await get_json(bridge, POOLS))["pools"]["a"]
    VALIDATOR.validate(pool)
    assert pool["utilization"]["cpu_avg"] is None
    assert pool["load"]["inflight_total"] == 0
    assert pool["load"]["qps_1m_total"] is None
    assert pool["metric_source"]["inflight"] == "proxy_dispatch"
    assert pool["health"]["data_quality"] == "partial"


async def test_one_pool_is_the_same_summary(canned: CannedPrometheus,
                                            make_bridge: MakeBridge) -> None:
    canned.vector = [*pool_series("a"), *pool_series("b")]
    bridge = await make_bridge(canned.url)
    every = (await get_json(bridge, POOLS))["pools"]
    resp = await bridge.http.get("/v1/pool_resources/a")
    assert resp.status == 200
    assert resp.headers["X-Poolscope-Stale"] == "false"
    assert await resp.json() == every["a"]
    missing = await get_json(bridge, "/v1/pool_resources/nope", 404)
    assert "unknown proxy_id" in missing["error"]



async def test_the_bridge_asks_prometheus_for_an_uncompressed_answer(
        canned: CannedPrometheus, make_bridge: MakeBridge) -> None:
    """On the loopback / LAN hop gzip costs both ends more CPU than the bytes it saves,
    and the raw query the benchmark compares with is read uncompressed too."""
    canned.vector = pool_series("a")
    bridge = await make_bridge(canned.url, query_shards=2)
    await get_json(bridge, POOLS)
    assert canned.accept_encodings == ["identity"] * 3  # two shards, their timestamps


async def test_the_bridge_asks_to_be_answered_at_the_time_it_names(
        canned: CannedPrometheus, make_bridge: MakeBridge) -> None:
    """VictoriaMetrics would otherwise answer as of `now - latencyOffset`, labelled with
    the time the bridge asked for: a snapshot older than its `generated_at` says."""
    canned.vector = pool_series("a")
    bridge = await make_bridge(canned.url, query_shards=2)
    await get_json(bridge, POOLS)
    assert canned.nocache == ["1"] * 3


async def test_refreshes_with_other_values_serve_what_a_fresh_bridge_serves(
        canned: CannedPrometheus, make_bridge: MakeBridge, clock: FakeClock) -> None:
    """Later refreshes read only the values while the series stay the same (enough
    pools for that: 120 series); they serve exactly what a first read serves."""
    def fleet(value: str, pools: str = "abcd", **labels: str) -> list[Series]:
        return [s for p in pools for s in pool_series(p, value=value, **labels)]

    changes = [fleet("1"), fleet("0"), fleet("NaN"), fleet("2", "abcde"), fleet("3", "abcde"),
               fleet("3", "abcde", source="nvml"), fleet("4", "abcde", source="nvml")]
    bridge = await make_bridge(canned.url, cache_ttl_s=0.0)
    for vector in changes:
        canned.vector = vector
        clock.now += 1
        served = (await get_json(bridge, POOLS))["pools"]
        first_read = (await get_json(await make_bridge(canned.url), POOLS))["pools"]
        assert served == first_read
    assert served["e"]["metric_source"]["resource"] == "nvml"
    assert served["e"]["load"]["inflight_total"] == 4.0



async def test_a_replaced_snapshot_is_freed_only_after_its_successor_is_served(
        canned: CannedPrometheus, make_bridge: MakeBridge) -> None:
    canned.vector = pool_series("a")
    bridge = await make_bridge(canned.url, cache_ttl_s=0.0)
    cache = bridge.http.app[CACHE]
    first = weakref.ref((await cache.get()).snapshot)
    await get_json(bridge, POOLS)  # a refresh replaces it
    assert first() is not None
    # The probe answers a bool: holding what `first()` returns would keep it alive.
    await until(lambda: first() is None, bool,
                f"the replaced snapshot freed {RETIRE_AFTER_S:g} s after its successor")


HOSTILE = ['a"b', "a{b}", 'x=~".+"', "a\nb", "a\n", "ünïcode", "a b", "a'b", "x" * 129,
           "a)or(vector(1)", "a\\b"]


@pytest.mark.parametrize("proxy_id", HOSTILE)
async def test_hostile_proxy_id_is_400_and_never_queried(proxy_id: str,
                                                         canned: CannedPrometheus,
                                                         make_bridge: MakeBridge) -> None:
    canned.vector = pool_series("a")
    bridge = await make_bridge(canned.url)
    await get_json(bridge, POOLS)  # the bridge has queried at least once
    doc = await get_json(bridge, f"/v1/pool_resources/{urllib.parse.quote(proxy_id, safe='')}",
                         400)
    assert "invalid proxy_id" in doc["error"]
    assert all(proxy_id not in promql for promql, _ in canned.queries)
    assert_only_rollups(canned)


async def test_megabyte_proxy_id_is_rejected(canned: CannedPrometheus,
                                             make_bridge: MakeBridge) -> None:
    bridge = await make_bridge(canned.url)
    resp = await bridge.http.get("/v1/pool_resources/" + "x" * 1_000_000)
    assert resp.status == 400
    assert canned.queries == []


async def test_ha_pair_fails_over_in_order(canned: CannedPrometheus,
                                           make_bridge: MakeBridge) -> None:
    broken = await CannedPrometheus(fail_status=500).start()
    try:
        canned.vector = pool_series("a")
        bridge = await make_bridge(broken.url, canned.url)
        doc = await get_json(bridge, POOLS)
        assert doc["stale"] is False and list(doc["pools"]) == ["a"]
        # Same query, same evaluation time, on both: the answer does not depend on
        # which member of the pair gave it.
        assert broken.queries == canned.queries
        assert bridge.metric("poolscope_scheduler_bridge_backend_query_errors_total",
                             backend=broken.url, cause="api_error") == 2
    finally:
        await broken.close()


async def test_down_serves_stale_then_503_then_recovers(canned: CannedPrometheus,
                                                        make_bridge: MakeBridge,
                                                        clock: FakeClock) -> None:
    canned.vector = pool_series("a")
    bridge = await make_bridge(canned.url, cache_ttl_s=1.0, stale_after_s=30.0)
    fresh = await get_json(bridge, POOLS)

    canned.fail_status = 503
    clock.now += 10
    stale, age = await aged(bridge, POOLS)
    assert stale["stale"] is True
    assert age == pytest.approx(10, abs=0.01)
    assert stale["pools"] == fresh["pools"]
    resp = await bridge.http.get("/v1/pool_resources/a")
    assert resp.headers["X-Poolscope-Stale"] == "true"
    await get_json(bridge, "/readyz", 503)

    clock.now += 25
    gone = await get_json(bridge, POOLS, 503)
    assert gone["backends"] == [{"backend": canned.url, "cause": "api_error",
                                 "detail": "HTTP 503: canned failure"}]
    assert gone["last_good_age_s"] == pytest.approx(35, abs=0.01)

    canned.fail_status = None
    clock.now += 2
    back = await get_json(bridge, POOLS)
    assert back["stale"] is False
    assert back["generated_at"] == round(clock.now, 3)
    await get_json(bridge, "/readyz")


async def test_unreachable_backend_is_named_in_the_503(make_bridge: MakeBridge) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    bridge = await make_bridge(dead)
    doc = await get_json(bridge, POOLS, 503)
    assert [(e["backend"], e["cause"]) for e in doc["backends"]] == [(dead, "connect")]
    assert doc["last_good_age_s"] is None
    await get_json(bridge, "/readyz", 503)
    assert (await bridge.http.get("/healthz")).status == 200


async def test_slow_backend_times_out(canned: CannedPrometheus,
                                      make_bridge: MakeBridge) -> None:
    canned.gate = asyncio.Event()  # never set: the backend never answers
    bridge = await make_bridge(canned.url, query_timeout_s=0.2)
    doc = await get_json(bridge, POOLS, 503)
    assert doc["backends"][0]["cause"] == "timeout"
    canned.gate.set()


async def test_malformed_answer_is_a_bad_response(make_bridge: MakeBridge) -> None:
    odd = await CannedPrometheus().start()
    odd.vector = [({"__name__": "proxy_pool:instances:count", "proxy_id": "a"}, "not a number")]
    try:
        bridge = await make_bridge(odd.url)
        doc = await get_json(bridge, POOLS, 503)
        assert doc["backends"][0]["cause"] == "bad_response"
    finally:
        await odd.close()


async def test_concurrent_requests_share_one_refresh(canned: CannedPrometheus,
                                                     make_bridge: MakeBridge) -> None:
    canned.vector = pool_series("a")
    canned.gate = asyncio.Event()
    bridge = await make_bridge(canned.url, cache_ttl_s=1.0)
    requests = [asyncio.create_task(bridge.http.get(POOLS)) for _ in range(20)]
    await until(lambda: canned.queries, bool, "the refresh reached Prometheus")
    canned.gate.set()
    responses = await asyncio.gather(*requests)
    bodies = [await r.json() for r in responses]
    assert len(canned.rollup_queries) == 1
    assert {b["generated_at"] for b in bodies} == {bodies[0]["generated_at"]}
    assert bridge.metric("poolscope_scheduler_bridge_cache_requests_total",
                         result="miss") == 1
    assert bridge.metric("poolscope_scheduler_bridge_refreshes_total", outcome="ok") == 1


async def test_bearer_token(canned: CannedPrometheus, make_bridge: MakeBridge) -> None:
    canned.vector = pool_series("a")
    bridge = await make_bridge(canned.url, exposure=Exposure(Access(bearer_token="s3cret")))
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
        for path in (POOLS, "/metrics", "/readyz", "/nowhere"):
            resp = await bridge.http.get(path, headers=headers)
            assert resp.status == 401, (path, headers)
            assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    assert canned.queries == []
    assert (await bridge.http.get("/healthz")).status == 200
    ok = await bridge.http.get(POOLS, headers={"Authorization": "Bearer s3cret"})
    assert ok.status == 200


async def test_request_bodies_are_refused_unread(canned: CannedPrometheus,
                                                make_bridge: MakeBridge) -> None:
    canned.vector = pool_series("a")
    bridge = await make_bridge(canned.url)
    resp = await bridge.http.get(POOLS, data=b"x" * 1024)
    assert resp.status == 413
    assert "no request body" in (await resp.json())["error"]
    assert canned.queries == []


async def test_sources_say_what_is_wired_now(canned: CannedPrometheus,
                                             make_bridge: MakeBridge) -> None:
    canned.vector = [
        series("proxy_pool:cpu_utilization:avg", "a", "0.5", "psutil"),
        series("proxy_pool:cpu_utilization:avg", "b", "NaN", "psutil"),
        series("proxy_pool:queue_depth:sum", "a", "2", "proxy_queue", queue="ready")]
    bridge = await make_bridge(canned.url)
    doc = await get_json(bridge, "/debug/pool_resource_sources")
    by_path = {e["path"]: e for e in doc["fields"]}
    assert list(by_path) == [*(f.path for f in FIELDS), DATA_QUALITY_PATH]
    assert doc["pools"] == 2
    cpu = by_path["utilization.cpu_avg"]
    assert (cpu["wired"], cpu["measured"], cpu["sources"]) == (2, 1, {"psutil": 2})
    assert cpu["classification"] == "real-time measured"
    assert cpu["rollup"] == "proxy_pool:cpu_utilization:avg"
    ready = by_path["load.ready_queue_depth"]
    assert (ready["wired"], ready["matchers"]) == (1, {"queue": "ready"})
    qps = by_path["load.qps_1m_total"]
    assert (qps["wired"], qps["sources"]) == (0, {})
    assert qps["null_when"] and qps["lower_layer"]


async def test_metrics_are_labelled_by_route_template(canned: CannedPrometheus,
                                                      make_bridge: MakeBridge) -> None:
    canned.vector = pool_series("a")
    bridge = await make_bridge(canned.url)
    for pid in ("a", "b", "c%22"):
        await bridge.http.get(f"/v1/pool_resources/{pid}")
    await bridge.http.get(POOLS)
    text = await (await bridge.http.get("/metrics")).text()
    routes = set(re.findall(r'request_duration_seconds_count\{route="([^"]*)"', text))
    assert routes == {"/v1/pool_resources/{proxy_id}", POOLS}
    # "a" refreshed; "b" and the list were served from it; "c\"" never got that far.
    assert bridge.metric("poolscope_scheduler_bridge_cache_requests_total", result="hit") == 2
    assert bridge.metric("poolscope_scheduler_bridge_backend_query_duration_seconds_count",
                         backend=canned.url) == 2  # one refresh: the rollups, their timestamps
    assert bridge.metric("poolscope_scheduler_bridge_snapshot_pools") == 1


async def test_shards_read_the_same_snapshot_at_one_time(canned: CannedPrometheus,
                                                         make_bridge: MakeBridge,
                                                         clock: FakeClock) -> None:
    canned.vector = [*pool_series("a"), *pool_series("b", value="0"),
                     series("proxy_pool:not_in_fields_yet", "c", "1")]
    single = await get_json(await make_bridge(canned.url), POOLS)
    canned.queries.clear()
    sharded = await get_json(await make_bridge(canned.url, query_shards=4), POOLS)
    assert sharded == single
    assert sorted(sharded["pools"]) == ["a", "b", "c"]
    assert len(canned.rollup_queries) == 4
    assert {at for _, at in canned.queries} == {f"{clock.now:.3f}"}
    assert_only_rollups(canned)


async def test_one_failing_shard_nulls_its_fields(canned: CannedPrometheus,
                                                  make_bridge: MakeBridge) -> None:
    canned.vector = pool_series("a")
    canned.fail_matching = "__name__!~"  # the last shard
    bridge = await make_bridge(canned.url, query_shards=2)
    doc = await get_json(bridge, POOLS)
    pool = doc["pools"]["a"]
    VALIDATOR.validate(pool)
    values = [pool[f.section][f.key] for f in FIELDS]
    assert None in values and any(v is not None for v in values)
    assert pool["health"]["data_quality"] == "partial"
    assert doc["stale"] is False
    assert bridge.metric("poolscope_scheduler_bridge_refreshes_total", outcome="partial") == 1
