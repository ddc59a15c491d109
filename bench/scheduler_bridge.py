"""What the Scheduler bridge costs on top of the one query it makes.

`python -m bench.scheduler_bridge --pools 10,100,1000`: for each pool count, a real
Prometheus scrapes a target serving every `proxy_pool:*` rollup of N pools; the
bridge runs as its own process with the cache disabled (--cache-ttl 0, so every
request is a full refresh); requests alternate between the bridge's
/debug/proxy_pool_resources and one raw /api/v1/query for the same selector,
evaluated at "now" to the millisecond like the bridge's. Like for like: one client
session with kept-alive connections and identity encoding, the whole body read on
both sides (the bridge reads Prometheus' the same way). Target: bridge <= 1.25x the
raw query at 1,000 pools. The rollups' label sets stay the same from scrape to scrape,
as recording rules' do, so after its first answer the bridge reads only the values of
each answer (scheduler_bridge/vector_layout.py); nothing is kept by value, so the
constant values served here cost it what changing ones would. The bridge's CPU time
per request is reported too: on a shared box it moves far less than response times.

A second bridge process with --cache-ttl 1 is then polled every --poll-interval
seconds: what a Scheduler polling faster than the TTL sees (mostly cache hits, a
refresh once per TTL). It is a separate, labelled row, never the cache-off number.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import psutil

from bench.rollup_target import Series, rollup_target, series
from bench.teardown import unwind_on_sigterm
from scheduler_bridge.fields import DATA_QUALITY_LABEL, DATA_QUALITY_ROLLUP, FIELDS, Kind
from scheduler_bridge.queries import SNAPSHOT_QUERY
from tests.support.prometheus import (
    REPO,
    free_port,
    running_prometheus,
    scrape_config,
    wait_http,
)

ROUTE = "/debug/proxy_pool_resources"
WARM_UP = 3  # requests of each kind not measured


def fleet(pools: int) -> list[Series]:
    """Every rollup of `pools` pools with varied, realistic values."""
    out: list[Series] = []
    for i in range(pools):
        pid = f"hp_10.{i // 250}.{i % 250}.1:8001"
        for j, f in enumerate(FIELDS):
            if f.kind is Kind.STATE:
                for k, state in enumerate(("accepting", "draining", "rejecting")):
                    out.append(series(f.rollup, pid, "1" if k == i % 3 else "0", "derived",
                                      **{f.state_label: state}))
                continue
            value = str(i % 8) if f.kind is Kind.COUNT else f"{(i * 31 + j) % 1000 / 997:.6g}"
            out.append(series(f.rollup, pid, value, "psutil", **f.matchers))
        for k, quality in enumerate(("complete", "partial", "missing")):
            out.append(series(DATA_QUALITY_ROLLUP, pid, "1" if k == 0 else "0", "derived",
                              **{DATA_QUALITY_LABEL: quality}))
    return out


@dataclass
class Row:
    pools: int
    series: int
    raw: list[float]
    bridge: list[float]
    cached: list[float]
    raw_bytes: int
    bridge_bytes: int
    bridge_cpu: float  # the bridge process' CPU seconds per cache-off request


def p99(xs: Sequence[float]) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


async def _timed_get(session: aiohttp.ClientSession, url: str,
                     params: dict[str, str] | None = None) -> tuple[float, int]:
    started = time.perf_counter()
    async with session.get(url, params=params) as resp:
        body = await resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{url}: HTTP {resp.status}: {body[:300]!r}")
    return time.perf_counter() - started, len(body)


@asynccontextmanager
async def bridge_process(prom_url: str, *flags: str) -> AsyncIterator[str]:
    """The bridge as its own process, as deployed, with `flags`; yields its base URL."""
    async with _bridge(prom_url, *flags) as (url, _):
        yield url


@asynccontextmanager
async def _bridge(prom_url: str, *flags: str) -> AsyncIterator[tuple[str, psutil.Process]]:
    """`bridge_process`, with the process for reading its CPU time."""
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "scheduler_bridge", "--prometheus-url", prom_url,
        "--listen", f"127.0.0.1:{port}", "--log-level", "WARNING", *flags, cwd=REPO,
        stdout=asyncio.subprocess.DEVNULL)
    try:
        await asyncio.to_thread(wait_http, f"http://127.0.0.1:{port}/healthz")
        yield f"http://127.0.0.1:{port}", psutil.Process(proc.pid)
    finally:
        proc.terminate()
        await proc.wait()


async def measure(pools: int, requests: int, workdir: Path, shards: int,
                  poll_interval: float) -> Row:
    vector = fleet(pools)
    async with rollup_target(vector) as target:
        job = scrape_config("rollups", [target], interval="2s")
        # Recording rules aggregate by proxy_id and source: their series carry no
        # job/instance. Dropping them here stores exactly what the rules would.
        job["metric_relabel_configs"] = [{"action": "labeldrop", "regex": "instance|job"}]
        with running_prometheus(workdir / f"prom-{pools}", [job], rule_files=[]) as prom:
            await asyncio.to_thread(wait_for_series, prom, len(vector))
            # The same client for every side: kept-alive connections, identity
            # encoding (as the bridge asks Prometheus), the whole body read each time.
            async with aiohttp.ClientSession(
                    headers={"Accept-Encoding": "identity"}) as session:
                async with _bridge(prom.url, "--cache-ttl", "0",
                                   "--query-shards", str(shards)) as (bridge, process):
                    raw, served, raw_bytes, bridge_bytes, cpu = await _alternate(
                        session, prom.url, bridge, process, requests)
                async with bridge_process(prom.url, "--cache-ttl", "1",
                                          "--query-shards", str(shards)) as bridge:
                    cached = await _poll(session, bridge, requests, poll_interval)
    return Row(pools, len(vector), raw, served, cached, raw_bytes, bridge_bytes, cpu)


def wait_for_series(prom: object, expected: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if len(prom.query(SNAPSHOT_QUERY)) >= expected:  # type: ignore[attr-defined]
            return
        time.sleep(0.5)
    raise TimeoutError(f"Prometheus did not ingest {expected} series")


def _cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


async def _alternate(session: aiohttp.ClientSession, prom_url: str, bridge_url: str,
                     process: psutil.Process, requests: int
                     ) -> tuple[list[float], list[float], int, int, float]:
    """Raw query and bridge request in turn; also the bridge's CPU per measured request,
    which a busy box inflates far less than response times (its own work only)."""
    raw: list[float] = []
    served: list[float] = []
    raw_bytes = bridge_bytes = 0
    cpu_from = 0.0
    for i in range(requests + WARM_UP):
        if i == WARM_UP:
            cpu_from = _cpu_s(process)
        params = {"query": SNAPSHOT_QUERY, "time": f"{time.time():.3f}"}
        t_raw, raw_bytes = await _timed_get(session, f"{prom_url}/api/v1/query", params)
        t_bridge, bridge_bytes = await _timed_get(session, f"{bridge_url}{ROUTE}")
        if i >= WARM_UP:
            raw.append(t_raw)
            served.append(t_bridge)
    return raw, served, raw_bytes, bridge_bytes, (_cpu_s(process) - cpu_from) / requests


async def _poll(session: aiohttp.ClientSession, bridge_url: str, requests: int,
                interval: float) -> list[float]:
    """A Scheduler polling every `interval`: hits, and a refresh whenever the TTL ran out."""
    times: list[float] = []
    for i in range(requests + WARM_UP):
        started = time.perf_counter()
        elapsed, _ = await _timed_get(session, f"{bridge_url}{ROUTE}")
        if i >= WARM_UP:
            times.append(elapsed)
        await asyncio.sleep(max(0.0, interval - (time.perf_counter() - started)))
    return times


def table(rows: Sequence[Row], poll_interval: float) -> str:
    lines = ["| pools | series | served by | median / p99 (ms) | raw query median / p99 (ms) "
             "| ratio median | ratio p99 | body (KiB), raw: bridge | bridge CPU / request |",
             "|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        rm, rp = statistics.median(r.raw), p99(r.raw)
        for label, times, cpu in (
                ("bridge, cache off", r.bridge, f"{r.bridge_cpu * 1e3:.1f} ms"),
                (f"bridge, cache ttl 1 s, polled every {poll_interval:g} s", r.cached, "")):
            m, p = statistics.median(times), p99(times)
            lines.append(f"| {r.pools} | {r.series} | {label} | {m * 1e3:.1f} / {p * 1e3:.1f} "
                         f"| {rm * 1e3:.1f} / {rp * 1e3:.1f} | {m / rm:.2f}x | {p / rp:.2f}x "
                         f"| {r.raw_bytes // 1024}: {r.bridge_bytes // 1024} "
                         f"| {cpu} |")
    return "\n".join(lines)


async def run(pool_counts: Sequence[int], requests: int, shards: int,
              poll_interval: float) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="bench-scheduler-bridge-") as tmp:
        return [await measure(n, requests, Path(tmp), shards, poll_interval)
                for n in pool_counts]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--pools", default="10,100,1000",
                   help="comma-separated pool counts (default 10,100,1000)")
    p.add_argument("--requests", type=int, default=60, help="measured requests of each kind")
    p.add_argument("--query-shards", type=int, default=1,
                   help="the bridge's --query-shards (default 1: one query)")
    p.add_argument("--poll-interval", type=float, default=0.1,
                   help="seconds between polls of the cached bridge (default 0.1)")
    args = p.parse_args(argv)
    rows = asyncio.run(run([int(n) for n in args.pools.split(",")], args.requests,
                           args.query_shards, args.poll_interval))
    print(table(rows, args.poll_interval))
    return 0


if __name__ == "__main__":
    unwind_on_sigterm()
    sys.exit(main())
