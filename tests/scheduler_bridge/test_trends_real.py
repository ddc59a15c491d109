"""Trends read from the project's rules: a Proxy-side page and an Instance page, served
fixed, scraped by a real Prometheus (and by VictoriaMetrics' vmagent, its rules run by
vmalert), so the range queries, their grid and the rollups' names meet a real backend."""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path

import aiohttp
import pytest

from deploy.demo.cluster import Pool
from harness.polling import eventually
from harness.prometheus import running_prometheus, scrape_config
from harness.stacks import victoria_metrics
from harness.static_http import serving
from poolscope.bridge.promapi import PrometheusAPI
from poolscope.bridge.trends import TREND_POINTS, TREND_STEP_S, Trends, read_trends

pytestmark = pytest.mark.integration

# Two pools: pool-t inflight 3 of 12 (load 0.25), pool-u 6 of 12 (0.5); one engine
# each, saturated 0.4 and 0.8.
PROXY_PAGE = b"""\
# TYPE poolscope_proxy_pool_inflight_requests gauge
poolscope_proxy_pool_inflight_requests{proxy_id="pool-t",source="proxy_dispatch"} 3
poolscope_proxy_pool_inflight_requests{proxy_id="pool-u",source="proxy_dispatch"} 6
# TYPE poolscope_proxy_pool_capacity_requests gauge
poolscope_proxy_pool_capacity_requests{proxy_id="pool-t",source="proxy_registry"} 12
poolscope_proxy_pool_capacity_requests{proxy_id="pool-u",source="proxy_registry"} 12
"""
INSTANCE_PAGE = b"""\
# TYPE poolscope_engine_saturation_ratio gauge
poolscope_engine_saturation_ratio{proxy_id="pool-t",instance_id="t-1",source="engine"} 0.4
poolscope_engine_saturation_ratio{proxy_id="pool-u",instance_id="u-1",source="engine"} 0.8
"""
EXPECTED = {"pool-t": (0.25, 0.4), "pool-u": (0.5, 0.8)}


def _read(url: str, proxy_id: str | None = None) -> Trends:
    async def read() -> Trends:
        async with aiohttp.ClientSession() as session:
            return await read_trends(PrometheusAPI([url], session, 10.0), time.time(), proxy_id)

    return asyncio.run(read())


def _newest_measured(trends: Trends) -> bool:
    return set(trends.pools) == set(EXPECTED) and all(
        trend.load_ratio[-1] is not None and trend.saturation[-1] is not None
        for trend in trends.pools.values())


def _check(url: str, started: float) -> None:
    """Once the newest slot is measured: the values the rules compute there, and no
    value in any slot before the backend had data."""
    trends = eventually(lambda: _read(url), _newest_measured, 90, "the newest slot measured")
    before = [i for i in range(TREND_POINTS) if trends.start + i * TREND_STEP_S < started]
    assert before, "the window reaches back before the backend started"
    for pool, (load, saturation) in EXPECTED.items():
        trend = trends.pools[pool]
        assert trend.load_ratio[-1] == pytest.approx(load)
        assert trend.saturation[-1] == pytest.approx(saturation)
        assert all(math.isfinite(v) for v in (*trend.load_ratio, *trend.saturation)
                   if v is not None)
        assert {trend.load_ratio[i] for i in before} == {trend.saturation[i] for i in before} \
            == {None}
    one = _read(url, "pool-u")
    assert sorted(one.pools) == ["pool-u"]
    assert one.pools["pool-u"].load_ratio[-1] == pytest.approx(0.5)


def test_trends_from_prometheus_and_its_rules(tmp_path: Path) -> None:
    with serving(PROXY_PAGE) as proxy, serving(INSTANCE_PAGE) as instance:
        targets = [url.removeprefix("http://").removesuffix("/metrics")
                   for url in (proxy, instance)]
        started = time.time()
        with running_prometheus(tmp_path, [scrape_config("pages", targets)]) as prom:
            _check(prom.url, started)


def test_trends_from_victoria_metrics_and_vmalert(tmp_path: Path) -> None:
    with serving(PROXY_PAGE) as proxy, serving(INSTANCE_PAGE) as instance:
        pool = Pool("pool-t", proxy.removesuffix("/metrics"),
                    (instance.removesuffix("/metrics"),))
        started = time.time()
        with victoria_metrics(tmp_path, [pool], 1.0) as vm:
            _check(vm.url, started)
