"""The status pages as HTTP caching serves them: one page per snapshot, rendered once
when every part of it could be read, its ETag and 304, gzip, and the snapshot's
Cache-Control instead of no-store."""

from __future__ import annotations

import gzip
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from poolscope.scheduler_bridge.status import page
from poolscope.scheduler_bridge.status.chart import CACHED_CHARTS, SPARK, trend_svg
from poolscope.scheduler_bridge.status.model import TrendView
from tests.status.conftest import MakeBridge, StatusBridge
from tests.status.fleet import DRILLED, blind_pool, busy_pool, drilled_instances, drilled_trend

FLEET = "/status"
POOL = f"/status/pools/{DRILLED}"


async def drilled(make_bridge: MakeBridge) -> StatusBridge:
    return await make_bridge([*busy_pool(DRILLED), *blind_pool("batch-cpu")],
                             local={DRILLED: drilled_instances()},
                             matrix=drilled_trend(time.time()))


@pytest.fixture
def renders(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Which page each render drew."""
    drawn: list[str] = []

    def counting(name: str, draw: Callable[..., str]) -> Callable[..., str]:
        def counted(*args: Any) -> str:
            drawn.append(name)
            return draw(*args)
        return counted

    monkeypatch.setattr(page, "render_body", counting(FLEET, page.render_body))
    monkeypatch.setattr(page, "render_pool_body", counting(POOL, page.render_pool_body))
    return drawn


@pytest.mark.parametrize("path", [FLEET, POOL])
async def test_a_page_is_rendered_once_then_revalidated(
        path: str, make_bridge: MakeBridge, renders: list[str]) -> None:
    bridge = await drilled(make_bridge)
    first = await bridge.http.get(path, headers={"Accept-Encoding": "identity"})
    html = await first.read()
    assert first.status == 200 and first.content_type == "text/html"
    assert "default-src 'none'" in first.headers["Content-Security-Policy"]
    assert first.headers["Cache-Control"].startswith("max-age=")
    assert first.headers["Vary"] == "Accept-Encoding"

    again = await bridge.http.get(path, headers={"If-None-Match": first.headers["ETag"]})
    assert again.status == 304 and await again.read() == b""
    async with aiohttp.ClientSession(auto_decompress=False) as raw, raw.get(
            bridge.http.make_url(path), headers={"Accept-Encoding": "gzip"}) as resp:
        assert resp.headers["Content-Encoding"] == "gzip"
        assert gzip.decompress(await resp.read()) == html
    assert renders == [path]


async def test_a_page_missing_a_part_is_drawn_again_until_it_has_it(
        make_bridge: MakeBridge, renders: list[str]) -> None:
    bridge = await drilled(make_bridge)
    bridge.prometheus.fail_matching = "poolscope_collector_errors_total"  # the Instances
    broken = await bridge.http.get(POOL)
    assert "could not be read" in await broken.text()
    assert broken.headers["Cache-Control"] == "no-cache"  # no browser keeps it
    again = await bridge.http.get(POOL, headers={"If-None-Match": broken.headers["ETag"]})
    assert again.status == 200 and again.headers["ETag"] != broken.headers["ETag"]

    bridge.prometheus.fail_matching = None
    whole = await bridge.http.get(POOL, headers={"If-None-Match": again.headers["ETag"]})
    assert whole.status == 200 and "could not be read" not in await whole.text()
    kept = await bridge.http.get(POOL, headers={"If-None-Match": whole.headers["ETag"]})
    assert kept.status == 304
    assert renders == [POOL, POOL, POOL]


async def test_no_snapshot_is_a_page_never_kept(make_bridge: MakeBridge) -> None:
    bridge = await make_bridge([])
    bridge.prometheus.fail_status = 503
    resp = await bridge.http.get(FLEET)
    assert resp.status == 503 and resp.headers["Cache-Control"] == "no-store"
    assert "ETag" not in resp.headers


async def test_a_stale_page_is_another_page_that_says_when_its_numbers_were_written(
        make_bridge: MakeBridge) -> None:
    bridge = await make_bridge([*busy_pool("busy")], cache_ttl_s=0.0)
    fresh = await bridge.http.get(FLEET)
    assert "STALE" not in await fresh.text()
    bridge.prometheus.fail_status = 503  # the next refresh fails: the last snapshot, stale
    stale = await bridge.http.get(FLEET, headers={"If-None-Match": fresh.headers["ETag"]})
    assert stale.status == 200 and stale.headers["X-Poolscope-Stale"] == "true"
    assert stale.headers["ETag"] != fresh.headers["ETag"]
    assert stale.headers["Cache-Control"] == "no-cache"
    assert "these numbers were written at" in await stale.text()


def test_the_charts_kept_drawn_are_capped_however_many_pools_came_and_went() -> None:
    for i in range(CACHED_CHARTS + 100):
        trend_svg(TrendView(float(i), 15.0, (0.5, None), (None, 0.25)), SPARK)
    assert trend_svg.cache_info().currsize == CACHED_CHARTS
