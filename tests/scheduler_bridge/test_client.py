"""The typed client: Python values, None for null, tolerant of added/removed fields."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp import web

from harness.canned_prometheus import CannedPrometheus, pool_series, series
from harness.prometheus import free_port
from poolscope.scheduler_bridge.client import BridgeError, SchedulerBridgeClient, parse_snapshot
from poolscope.service.auth import Access
from poolscope.service.web import Exposure
from tests.scheduler_bridge.conftest import FakeClock, MakeBridge


async def test_snapshot_from_a_live_bridge(canned: CannedPrometheus, make_bridge: MakeBridge,
                                           clock: FakeClock) -> None:
    canned.vector = [*pool_series("a", value="3", state="draining"),
                     series("proxy_pool:inflight_requests:sum", "b", "0")]
    bridge = await make_bridge(canned.url, exposure=Exposure(Access(bearer_token="t")))
    async with aiohttp.ClientSession() as session:
        bc = SchedulerBridgeClient(str(bridge.http.make_url("")), session, token="t")
        snap = await bc.snapshot()
    assert snap.generated_at == round(clock.now, 3)
    assert snap.stale is False
    a, b = snap.pools["a"], snap.pools["b"]
    assert a.instances.total == 3 and isinstance(a.instances.total, int)
    assert a.utilization.cpu_avg == pytest.approx(300.0)
    assert a.health.pool_admission_state == "draining"
    assert a.health.data_quality == "complete"
    assert b.load.inflight_total == 0
    assert b.load.qps_1m_total is None
    assert b.metric_source.qps_1m == "unknown"
    assert b.health.data_quality == "partial"


async def test_inflight_sampled_at_reaches_the_client_as_scraped(
        canned: CannedPrometheus, make_bridge: MakeBridge) -> None:
    """Prometheus' answer, the bridge's JSON and the client's float all keep the
    scrape time to the millisecond, beside the inflight it times."""
    canned.vector = [
        series("proxy_pool:inflight_requests:sum", "a", "4", "proxy_dispatch"),
        series("proxy_pool:inflight_requests:timestamp", "a", "1800000000.125", "proxy_dispatch"),
        series("proxy_pool:inflight_requests:sum", "b", "6", "engine"),
        series("proxy_pool:inflight_requests:timestamp", "b", "1799999999.001", "engine"),
        series("proxy_pool:instances:count", "c", "0")]
    bridge = await make_bridge(canned.url)
    async with aiohttp.ClientSession() as session:
        snap = await SchedulerBridgeClient(str(bridge.http.make_url("")), session).snapshot()
    a, b, c = snap.pools["a"].load, snap.pools["b"].load, snap.pools["c"].load
    assert (a.inflight_total, a.inflight_sampled_at) == (4, 1_800_000_000.125)
    assert (b.inflight_total, b.inflight_sampled_at) == (6, 1_799_999_999.001)
    assert (c.inflight_total, c.inflight_sampled_at) == (None, None)


async def test_unavailable_bridge_raises_with_the_cause(make_bridge: MakeBridge) -> None:
    bridge = await make_bridge(f"http://127.0.0.1:{free_port()}")
    async with aiohttp.ClientSession() as session:
        with pytest.raises(BridgeError) as err:
            await SchedulerBridgeClient(str(bridge.http.make_url("")), session).snapshot()
    assert err.value.status == 503
    assert err.value.body["backends"][0]["cause"] == "connect"


def test_parse_tolerates_added_and_missing_fields() -> None:
    doc = {"schema_version": 1, "generated_at": 5.0, "stale": True, "age_s": 4.5, "pools": {
        "old": {"schema_version": 1, "proxy_id": "old", "generated_at": 5.0,
                "load": {"inflight_total": 2, "some_future_field": 9},
                "future_section": {"x": 1}}}}
    snap = parse_snapshot(doc)
    assert (snap.stale, snap.age_s) == (True, 4.5)  # a bridge from before the headers
    assert parse_snapshot(doc, age_s=2.0).age_s == 2.0  # what the headers say comes first
    old = snap.pools["old"]
    assert old.load.inflight_total == 2
    assert old.load.capacity is None
    assert old.utilization.cpu_avg is None
    assert old.health.data_quality == "missing"
    assert old.metric_source.inflight == "unknown"


async def test_an_ingress_page_a_dead_port_and_a_wrong_body_are_one_exception() -> None:
    """What stands between the Scheduler and the bridge answers in its own ways: each
    reaches the Scheduler as a BridgeError that says what came, never as a
    JSONDecodeError or a raw transport error."""
    async def ingress(_: web.Request) -> web.Response:
        return web.Response(status=503, text="<html><body>503 Service Unavailable</body>"
                            "</html>", content_type="text/html")

    async def wrong(_: web.Request) -> web.Response:
        return web.json_response({"pools": "none"})

    async def listed(_: web.Request) -> web.Response:
        return web.json_response([])

    app = web.Application()
    app.router.add_get("/ingress/debug/proxy_pool_resources", ingress)
    app.router.add_get("/wrong/debug/proxy_pool_resources", wrong)
    app.router.add_get("/list/debug/proxy_pool_resources", listed)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with aiohttp.ClientSession() as session:
            base = f"http://127.0.0.1:{port}"
            with pytest.raises(BridgeError) as html:
                await SchedulerBridgeClient(f"{base}/ingress", session).snapshot()
            assert html.value.status == 503 and "Service Unavailable" in str(html.value)
            with pytest.raises(BridgeError) as body:
                await SchedulerBridgeClient(f"{base}/wrong", session).snapshot()
            assert body.value.status is None and "not a pool snapshot" in str(body.value)
            with pytest.raises(BridgeError, match="not a pool snapshot"):
                await SchedulerBridgeClient(f"{base}/list", session).snapshot()
            with pytest.raises(BridgeError) as dead:
                await SchedulerBridgeClient(f"http://127.0.0.1:{free_port()}",
                                            session).snapshot()
            assert dead.value.status is None and "ClientConnectorError" in str(dead.value)
    finally:
        await runner.cleanup()
