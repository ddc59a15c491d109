"""What the fleet status page's 15-minute trends cost, beside the refresh it rides on.

    python -m bench.status_page [--pools 1000] [--rounds 20]

A canned Prometheus on loopback answers every `proxy_pool:*` rollup of N pools and,
for the trends, 61 points of both trend rollups per pool. In one window, rounds
alternate between:

- the anchor: one snapshot read (`read_snapshot`: what the Scheduler bridge does
  once per rule evaluation, whoever asks);
- the trends' read (`read_trends`: two range queries, parsed and slotted), which
  `TrendReader` makes at most once per 15 s step and pool, however many pages are
  open;
- the page drawn from a snapshot already read: without the trends; with them, the
  first time in a step (one SVG per pool drawn); and with them again within the step
  (the charts kept drawn), which is what a page refreshed every 5 s mostly pays.

Prints the median milliseconds of each, its ratio to the anchor, and the page sizes.
HTTP to the canned Prometheus is in the reads (loopback, kept-alive); the page's own
HTTP is not.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence

import aiohttp
from markupsafe import Markup

from bench.scheduler_bridge import fleet
from harness.canned_prometheus import CannedPrometheus, RangeSeries
from poolscope.bridge.promapi import PrometheusAPI
from poolscope.bridge.queries import EVERY_POOL_EVALUATED, read_snapshot
from poolscope.bridge.trends import (
    LOAD_RATIO_ROLLUP,
    SATURATION_ROLLUP,
    TREND_POINTS,
    TREND_STEP_S,
    read_trends,
)
from poolscope.scheduler_bridge.client import BridgeSnapshot, parse_pool
from poolscope.scheduler_bridge.status.chart import trend_svg
from poolscope.scheduler_bridge.status.model import build_view
from poolscope.scheduler_bridge.status.page import render_body


def trend_matrix(pool_ids: Sequence[str], now: float) -> list[RangeSeries]:
    end = now // TREND_STEP_S * TREND_STEP_S
    steps = [end - k * TREND_STEP_S for k in range(TREND_POINTS - 1, -1, -1)]
    return [({"__name__": rollup, "proxy_id": pid, "source": "derived"},
             # A sequence of its own per pool (61 and 9973 are coprime): no two pools'
             # charts are alike, so none is drawn once for two.
             [(t, f"{(i * 61 + k) % 9973 / 9973:.4g}") for k, t in enumerate(steps)])
            for rollup in (LOAD_RATIO_ROLLUP, SATURATION_ROLLUP)
            for i, pid in enumerate(pool_ids)]


async def timed(read: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await read()
    return (time.perf_counter() - started) * 1000


def drawn(draw: Callable[[], object]) -> float:
    started = time.perf_counter()
    draw()
    return (time.perf_counter() - started) * 1000


async def measure(pools: int, rounds: int) -> list[tuple[str, float, int | None]]:
    vector = fleet(pools)
    pool_ids = sorted({m["proxy_id"] for m, _ in vector})
    prom = await CannedPrometheus(vector=vector, matrix=trend_matrix(pool_ids, time.time()),
                                  clock=time.time).start()
    try:
        async with aiohttp.ClientSession(headers={"Accept-Encoding": "identity"}) as session:
            api = PrometheusAPI((prom.url,), session, timeout_s=30.0)
            at = time.time()
            snap = await read_snapshot(api.samples, at, evaluated=EVERY_POOL_EVALUATED)
            trends = await read_trends(api, at)
            assert len(trends.pools) == pools, len(trends.pools)
            view = BridgeSnapshot(snap.generated_at, False, 0.0,
                                  {p: parse_pool(d) for p, d in snap.pools.items()})
            at = view.generated_at
            plain, with_trends = (render_body(build_view(view, t), Markup(), at)
                                  for t in (None, trends))
            times: dict[str, list[float]] = {k: [] for k in (
                "snapshot", "trends", "page", "page+trends, first in a step",
                "page+trends, again in the step")}
            for _ in range(rounds):
                times["snapshot"].append(await timed(lambda: read_snapshot(
                    api.samples, at, evaluated=EVERY_POOL_EVALUATED)))
                times["trends"].append(await timed(lambda: read_trends(api, at)))
                times["page"].append(drawn(lambda: render_body(build_view(view), Markup(), at)))
                trend_svg.cache_clear()
                times["page+trends, first in a step"].append(drawn(
                    lambda: render_body(build_view(view, trends), Markup(), at)))
                times["page+trends, again in the step"].append(drawn(
                    lambda: render_body(build_view(view, trends), Markup(), at)))
    finally:
        await prom.close()
    sizes = {"page": len(plain.encode()), "page+trends, first in a step": len(with_trends.encode())}
    return [(name, statistics.median(ms), sizes.get(name)) for name, ms in times.items()]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.status_page",
                                description=__doc__.splitlines()[0])
    p.add_argument("--pools", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=20)
    args = p.parse_args(argv)
    rows = asyncio.run(measure(args.pools, args.rounds))
    anchor = rows[0][1]
    print(f"{args.pools} pools, median of {args.rounds} rounds, one window")
    print("| what | ms | x snapshot read | bytes |")
    print("|---|---:|---:|---:|")
    for name, ms, size in rows:
        print(f"| {name} | {ms:.1f} | {ms / anchor:.2f} | {size or ''} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
