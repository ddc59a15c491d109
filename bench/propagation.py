"""End-to-end propagation: a load change at a Proxy until the Scheduler bridge shows it.

    python -m bench.propagation --samples 20 [--interval 1] \\
        [--backends single,federated,victoria] [--burst 8] [--json]

One demo pool (a Proxy, two simulated engines, their exporters) runs without
background load. Each sample sends a burst of long requests to the Proxy, notes
when the Proxy's own /metrics first counts them in flight (the change exists at
the source), then polls the bridge's JSON until load.inflight_total shows them.
The difference is the propagation time: scrape, rule evaluation (through every
layer a backend adds), and the bridge's query. It is compared with the floor the
issue sets, one scrape interval plus one evaluation interval; the target is a p95
within 1.5x that floor. The bridge runs with --cache-ttl 0 so the number is the
backend's; a production bridge adds up to its cache TTL (default 1 s) on top.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from deploy.demo.cluster import Cluster, Pool
from exporters.common.catalog import PROXY_INSTANCE_INFLIGHT
from tests.scale.stacks import federation, scheduler_bridge, victoria_metrics
from tests.support.cluster import demo_cluster

BACKENDS = ("single", "federated", "victoria")
TOKENS_PER_SECOND = 50.0  # the engine simulator's default decode speed
POLL_S = 0.02
T = TypeVar("T")


@dataclass
class Result:
    backend: str
    interval_s: float
    floor_s: float
    samples_s: list[float]

    @property
    def p50(self) -> float:
        return statistics.median(self.samples_s)

    @property
    def p95(self) -> float:
        ordered = sorted(self.samples_s)
        return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]

    def row(self) -> dict[str, float | str | int]:
        return {"backend": self.backend, "interval_s": self.interval_s,
                "floor_s": self.floor_s, "samples": len(self.samples_s),
                "p50_s": round(self.p50, 3), "p95_s": round(self.p95, 3),
                "max_s": round(max(self.samples_s), 3),
                "p95_over_floor": round(self.p95 / self.floor_s, 2)}


async def source_inflight(session: aiohttp.ClientSession, pool: Pool) -> float:
    """The Proxy's own count of requests in flight: the truth the bridge lags behind."""
    async with session.get(f"{pool.proxy_url}/metrics") as r:
        text = await r.text()
    return sum(s.value for family in text_string_to_metric_families(text)
               for s in family.samples if s.name == PROXY_INSTANCE_INFLIGHT.name)


async def bridge_inflight(session: aiohttp.ClientSession, bridge: str,
                          proxy_id: str) -> float | None:
    async with session.get(f"{bridge}/debug/proxy_pool_resources") as r:
        body = await r.json()
    pool = body["pools"].get(proxy_id)
    return None if pool is None else pool["load"]["inflight_total"]


async def until(probe: Callable[[], Awaitable[T]], ok: Callable[[T], bool],
                timeout: float) -> float:
    """Poll `probe` until `ok(value)`; the monotonic time it first held."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ok(await probe()):
            return time.monotonic()
        await asyncio.sleep(POLL_S)
    raise TimeoutError(f"not seen within {timeout:g}s")


async def one_sample(session: aiohttp.ClientSession, pool: Pool, bridge: str, burst: int,
                     hold_s: float, timeout: float) -> float:
    await until(lambda: bridge_inflight(session, bridge, pool.proxy_id),
                lambda v: v == 0, timeout)
    # A random phase against the scrape and evaluation ticks, as real changes have.
    await asyncio.sleep(random.uniform(0, hold_s / 4))
    body = {"model": "demo", "max_tokens": round(hold_s * TOKENS_PER_SECOND),
            "messages": [{"role": "user", "content": "hold a batch slot"}]}
    requests = [asyncio.create_task(session.post(f"{pool.proxy_url}/v1/chat/completions",
                                                 json=body)) for _ in range(burst)]
    try:
        at_source = await until(lambda: source_inflight(session, pool),
                                lambda v: v >= burst, timeout)
        at_bridge = await until(lambda: bridge_inflight(session, bridge, pool.proxy_id),
                                lambda v: v is not None and v >= burst, timeout)
    finally:
        for response in await asyncio.gather(*requests, return_exceptions=True):
            if isinstance(response, aiohttp.ClientResponse):
                response.release()
    return at_bridge - at_source


async def measure(pool: Pool, bridge: str, samples: int, burst: int, interval: float,
                  floor: float) -> list[float]:
    hold_s = 4 * floor  # in flight well past the slowest expected propagation
    timeout = 10 * floor + 60
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
        await until(lambda: bridge_inflight(session, bridge, pool.proxy_id),
                    lambda v: v is not None, 180)  # VictoriaMetrics: ~10 s per rule layer
        return [await one_sample(session, pool, bridge, burst, hold_s, timeout)
                for _ in range(samples)]


@contextmanager
def backend_url(name: str, cluster: Cluster, workdir: Path,
                interval: float) -> Iterator[str]:
    if name == "single":
        yield cluster.prometheus_url
    elif name == "federated":
        with federation(workdir, {"region-a": cluster.pools}, interval) as fed:
            yield fed.global_url
    else:
        with victoria_metrics(workdir, cluster.pools, interval) as vm:
            yield vm.url


def run(backends: Sequence[str], samples: int, interval: float, burst: int,
        workdir: Path) -> list[Result]:
    floor = 2 * interval
    results = []
    cluster_cm: AbstractContextManager[Cluster] = demo_cluster(
        workdir / "demo", proxies=1, instances=2, rate=0, scrape_interval=interval)
    with cluster_cm as cluster:
        pool = cluster.pools[0]
        for name in backends:
            with backend_url(name, cluster, workdir / name, interval) as url, \
                    scheduler_bridge(workdir / name, url, name, "--cache-ttl", "0") as bridge:
                took = asyncio.run(measure(pool, bridge, samples, burst, interval, floor))
            results.append(Result(name, interval, floor, took))
    return results


def table(results: Sequence[Result]) -> str:
    head = "| backend | interval | floor | p50 | p95 | max | p95 / floor |"
    lines = [head, "|---|---|---|---|---|---|---|"]
    lines += [f"| {r.backend} | {r.interval_s:g} s | {r.floor_s:g} s | {r.p50:.2f} s | "
              f"{r.p95:.2f} s | {max(r.samples_s):.2f} s | {r.p95 / r.floor_s:.2f} |"
              for r in results]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.propagation",
                                description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=20)
    p.add_argument("--interval", type=float, default=1.0,
                   help="scrape and evaluation interval, seconds (deploy/ uses 5)")
    p.add_argument("--backends", default="single",
                   help=f"comma-separated, of {','.join(BACKENDS)}")
    p.add_argument("--burst", type=int, default=8,
                   help="requests per load change (the demo pool takes 16 at once)")
    p.add_argument("--json", action="store_true", help="one JSON object per backend")
    args = p.parse_args(argv)
    args.backends = args.backends.split(",")
    if unknown := set(args.backends) - set(BACKENDS):
        p.error(f"unknown backends: {sorted(unknown)}")
    if args.samples < 1 or args.interval <= 0 or not 1 <= args.burst <= 16:
        p.error("--samples >= 1, --interval > 0, 1 <= --burst <= 16")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="poolscope-propagation-") as tmp:
        results = run(args.backends, args.samples, args.interval, args.burst, Path(tmp))
    if args.json:
        for r in results:
            print(json.dumps({**r.row(), "samples_s": [round(s, 3) for s in r.samples_s]}))
    else:
        print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
