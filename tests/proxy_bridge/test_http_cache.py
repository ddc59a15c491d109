"""The Proxy bridge's routes under the same HTTP caching as the Scheduler bridge's: one
body per snapshot with its ETag, 304, gzip, and the age in headers only."""

from __future__ import annotations

import gzip

import aiohttp
import orjson
import pytest

from harness.canned_prometheus import pool_series
from tests.proxy_bridge.conftest import PID, MakeBridge
from tests.proxy_bridge.pool_data import CannedPool, Inst, raw_series
from tests.scheduler_bridge.conftest import FakeClock

ROUTES = ("/debug/pool_resource", "/debug/pool_resource?detail=local",
          "/v1/pool_resource/heartbeat_payload", "/debug/pool_resource_sources")


@pytest.fixture
def pool(canned: CannedPool) -> CannedPool:
    canned.vector = [*pool_series(PID), *raw_series(PID, [Inst("i-1")])]
    canned.set_local(PID, [Inst("i-1")])
    return canned


@pytest.mark.parametrize("path", ROUTES)
async def test_each_route_is_one_body_per_snapshot(
        path: str, pool: CannedPool, make_bridge: MakeBridge, clock: FakeClock) -> None:
    bridge = await make_bridge(pool.url, cache_ttl_s=1.0, stale_after_s=30.0)
    first = await bridge.http.get(path, headers={"Accept-Encoding": "identity"})
    body = await first.read()
    assert first.status == 200 and first.headers["Vary"] == "Accept-Encoding"
    assert "age_s" not in orjson.loads(body)
    clock.now += 0.5
    again = await bridge.http.get(path, headers={"If-None-Match": first.headers["ETag"]})
    assert again.status == 304
    assert (again.headers["X-Poolscope-Age-S"], again.headers["X-Poolscope-Stale"]) == (
        "0.500", "false")
    async with aiohttp.ClientSession(auto_decompress=False) as raw, raw.get(
            bridge.http.make_url(path), headers={"Accept-Encoding": "gzip"}) as resp:
        assert resp.headers["Content-Encoding"] == "gzip"
        assert gzip.decompress(await resp.read()) == body

    pool.fail_status = 500  # the snapshot served stale: another body, another tag
    clock.now += 6
    stale = await bridge.http.get(path, headers={"If-None-Match": first.headers["ETag"]})
    assert stale.status == 200 and stale.headers["ETag"] != first.headers["ETag"]
    assert stale.headers["X-Poolscope-Stale"] == "true"
    assert stale.headers["Cache-Control"] == "no-cache"
