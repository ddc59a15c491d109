"""What the bridge serves when time lies: rollups written long ago, an answer replayed,
a clock that disagrees with Prometheus', a backend that hangs or answers without end.

Each case is one a hostile or unlucky operator produced against the running services;
the canned Prometheus plays the backend so the clocks can be set by hand."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from email.utils import formatdate

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from harness.canned_prometheus import CannedPrometheus, pool_series
from harness.polling import until
from tests.scheduler_bridge.conftest import Bridge, FakeClock, MakeBridge, aged

POOLS = "/debug/proxy_pool_resources"
# Far longer than any case may take: a request still waiting then waited for a timeout.
NEVER_S = 60.0
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def backend(query: Handler) -> AsyncIterator[str]:
    """A Prometheus stand-in answering /api/v1/query with `query`; its base URL."""
    app = web.Application()
    app.router.add_get("/api/v1/query", query)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


async def get(bridge: Bridge, path: str, status: int) -> dict:
    resp = await asyncio.wait_for(bridge.http.get(path), NEVER_S / 4)
    assert resp.status == status, (await resp.text())[:300]
    return await resp.json()


async def test_rollups_written_long_ago_are_served_stale_then_refused(
        canned: CannedPrometheus, make_bridge: MakeBridge) -> None:
    """Prometheus restarted on old data answers at once, with samples its rules wrote
    before it stopped: their own timestamps give the age, not the time of the query."""
    canned.vector = pool_series("a")
    bridge = await make_bridge(canned.url, cache_ttl_s=0.0, fresh_for_s=15.0,
                               stale_after_s=30.0)
    canned.rollups_age_s = 2.5
    fresh, age = await aged(bridge, POOLS)
    assert (fresh["stale"], age) == (False, 2.5)

    canned.rollups_age_s = 20.0
    old, age = await aged(bridge, POOLS)
    assert (old["stale"], age) == (True, 20.0)
    assert old["pools"] == fresh["pools"]
    resp = await bridge.http.get("/v1/pool_resources/a")
    assert (resp.headers["X-Poolscope-Stale"], resp.headers["Age"]) == ("true", "20")
    assert (await get(bridge, "/readyz", 503))["age_s"] == 20.0

    canned.rollups_age_s = 44.8
    gone = await get(bridge, POOLS, 503)
    assert "written 44.8 s ago" in gone["error"]
    assert gone["last_good_age_s"] == pytest.approx(44.8)

    canned.rollups_age_s = 0.5
    assert (await get(bridge, POOLS, 200))["stale"] is False


@pytest.fixture
async def replaying(canned: CannedPrometheus) -> AsyncIterator[str]:
    """A cache in front of Prometheus that forwards each query once, then replays its
    first answer for ever, with a fresh Date as a real cache would write."""
    first: dict[str, bytes] = {}

    async def query(request: web.Request) -> web.Response:
        promql = request.query["query"]
        if promql not in first:
            async with aiohttp.ClientSession() as session, session.get(
                    f"{canned.url}/api/v1/query", params=request.query) as resp:
                first[promql] = await resp.read()
        return web.Response(body=first[promql], content_type="application/json",
                            headers={"Date": formatdate(float(request.query["time"]),
                                                        usegmt=True)})

    async with backend(query) as url:
        yield url


async def test_a_replayed_answer_ages_until_it_is_refused(
        canned: CannedPrometheus, replaying: str, make_bridge: MakeBridge,
        clock: FakeClock) -> None:
    canned.vector = pool_series("a")
    bridge = await make_bridge(replaying, cache_ttl_s=0.0, fresh_for_s=15.0,
                               stale_after_s=30.0)
    assert (await get(bridge, POOLS, 200))["stale"] is False
    clock.now += 16
    replayed, age = await aged(bridge, POOLS)
    assert (replayed["stale"], age) == (True, 16.0)
    clock.now += 15
    assert "written 31.0 s ago" in (await get(bridge, POOLS, 503))["error"]


@pytest.mark.parametrize(("skew_s", "words"), [(120.0, "is 120 s ahead of this bridge's, at least"),
                                               (-400.0, "is 399 s behind this bridge's, at least")])
async def test_a_clock_that_disagrees_with_prometheus_is_refused_by_name(
        skew_s: float, words: str, canned: CannedPrometheus, make_bridge: MakeBridge,
        clock: FakeClock) -> None:
    """Behind, the bridge would read minutes-old rollups as current; ahead, it would ask
    about a future with no samples and serve every pool as gone."""
    canned.vector = pool_series("a")
    bridge = await make_bridge(canned.url, cache_ttl_s=0.0)
    canned.skew_s = 1.5  # within the Date header's second and the allowed skew
    assert (await get(bridge, POOLS, 200))["stale"] is False

    canned.skew_s = skew_s
    clock.now += 5
    stale, age = await aged(bridge, POOLS)
    assert (stale["stale"], age) == (True, 5.0)
    clock.now += 30
    gone = await get(bridge, POOLS, 503)
    assert [(e["cause"], words in e["detail"]) for e in gone["backends"]] == [
        ("clock_skew", True)]


async def test_a_hung_backend_gets_the_last_snapshot_at_once(
        canned: CannedPrometheus, make_bridge: MakeBridge, clock: FakeClock) -> None:
    canned.vector = pool_series("a")
    bridge = await make_bridge(canned.url, cache_ttl_s=1.0, query_timeout_s=NEVER_S,
                               answer_within_s=0.05)
    before = await get(bridge, POOLS, 200)
    canned.gate = asyncio.Event()  # from now on Prometheus takes the query and hangs
    clock.now += 6  # past the rules' next evaluation (5 s): the bridge asks
    waited, age = await aged(bridge, POOLS)  # waits answer_within for the refresh
    at_once = await get(bridge, "/v1/pool_resources/a", 200)  # the refresh is late
    assert (waited["stale"], age) == (True, 6.0)
    assert waited["pools"] == before["pools"] and at_once == before["pools"]["a"]
    await get(bridge, "/readyz", 503)
    assert bridge.metric("poolscope_scheduler_bridge_cache_requests_total",
                         result="late") == 3

    canned.gate.set()
    after = await until(lambda: get(bridge, POOLS, 200), lambda doc: not doc["stale"],
                        "the refresh in flight completes", NEVER_S / 4)
    assert after["generated_at"] == clock.now
    # The hung refresh was the one that answered: none other was started.
    assert bridge.metric("poolscope_scheduler_bridge_cache_requests_total",
                         result="miss") == 2


async def test_a_refresh_hung_past_stale_after_says_so(
        canned: CannedPrometheus, make_bridge: MakeBridge, clock: FakeClock) -> None:
    canned.vector = pool_series("a")
    bridge = await make_bridge(canned.url, cache_ttl_s=1.0, query_timeout_s=NEVER_S,
                               answer_within_s=0.05, stale_after_s=30.0)
    await get(bridge, POOLS, 200)
    canned.gate = asyncio.Event()
    clock.now += 40
    gone = await get(bridge, POOLS, 503)
    assert "not been answered within --answer-within" in gone["error"]
    canned.gate.set()


async def test_a_compressed_answer_is_bounded_as_it_inflates(
        make_bridge: MakeBridge) -> None:
    """A backend may gzip whatever the bridge asked for: the bound is on what it reads."""
    padding = b" " * 4_000_000
    body = gzip.compress(b'{"status":"success","data":{"resultType":"vector","result":[]}'
                         + padding + b"}")

    async def query(request: web.Request) -> web.Response:
        return web.Response(body=body, headers={"Content-Encoding": "gzip",
                                                "Content-Type": "application/json"})

    async with backend(query) as url:
        bridge = await make_bridge(url, max_answer_bytes=1_000_000)
        doc = await get(bridge, POOLS, 503)
    assert len(body) < 1_000_000
    assert [e["cause"] for e in doc["backends"]] == ["too_large"]


async def test_an_answer_over_the_bound_fails_its_refresh_by_name(
        canned: CannedPrometheus, make_bridge: MakeBridge) -> None:
    canned.vector = [s for pool in range(40) for s in pool_series(f"pool-{pool}")]
    bridge = await make_bridge(canned.url, max_answer_bytes=20_000)
    doc = await get(bridge, POOLS, 503)
    assert [(e["cause"], e["detail"]) for e in doc["backends"]] == [
        ("too_large", "answer over 20000 bytes")]


@pytest.fixture
async def endless() -> AsyncIterator[str]:
    """A backend whose answer never ends (chunked, no Content-Length)."""
    async def query(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        await resp.write(b'{"status":"success","data":{"resultType":"vector","result":[')
        while True:
            await resp.write(b'{"metric":{"__name__":"proxy_pool:x"},"value":[1,"1"]},' * 512)

    async with backend(query) as url:
        yield url


async def test_an_endless_answer_is_cut_at_the_bound(endless: str,
                                                     make_bridge: MakeBridge) -> None:
    bridge = await make_bridge(endless, max_answer_bytes=1 << 20, query_timeout_s=NEVER_S)
    doc = await get(bridge, POOLS, 503)
    assert {e["cause"] for e in doc["backends"]} == {"too_large"}
