"""What the Scheduler bridge's refresh costs on top of the one query it makes.

`python -m bench.scheduler_bridge --pools 10,100,1000`: for each pool count, a real
Prometheus scrapes a target serving every `proxy_pool:*` rollup of N pools every
--evaluation-interval seconds, so the rollups move as the rules would move them; the
bridge runs as its own process, as deployed, told that interval. After each move,
in one window and in an order rotated from one move to the next: one raw
/api/v1/query for the same selector, evaluated at "now" to the millisecond like the
bridge's, and one request to each bridge's /debug/proxy_pool_resources, which finds
the rollups moved (a probe) and reads every pool (a full read). Like for like: one
client session with kept-alive connections and identity encoding, the whole body
read on both sides (the bridge reads Prometheus' the same way). Target: the
bridge's refresh within 1.5x the raw query at 1,000 pools.

Side by side with it, in the same windows: the same bridge with every answer parsed
in full (bench/parsed_in_full.py: what keeping the last answer's label sets,
bridge/vector_layout.py, is worth), and with --baseline DIR the bridge of
another source tree (e.g. an earlier commit, `git archive`d), for a before and after.
The rollups' label sets stay the same from scrape to scrape, as recording rules'
do; nothing is kept by value, so the constant values served here cost it what
changing ones would. The bridges' CPU time per refresh is reported too: on a shared
box it moves far less than response times.

The first bridge is then polled every --poll-interval seconds: what a Scheduler
polling sees (mostly answers from memory; a probe at most once per TTL once the
rules are due; a full read once per evaluation). It is a separate, labelled row.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import psutil

from bench.checkouts import import_root, module_name
from bench.teardown import unwind_on_sigterm
from harness.prometheus import (
    REPO,
    free_port,
    running_prometheus,
    scrape_config,
    wait_http,
)
from harness.rollup_target import Series, rollup_target, series
from poolscope.bridge.queries import FLEET_EVALUATED_QUERY, FLEET_SERIES, SNAPSHOT_QUERY
from poolscope.contract.fields import DATA_QUALITY_LABEL, DATA_QUALITY_ROLLUP, FIELDS, Kind

ROUTE = "/debug/proxy_pool_resources"
WARM_UP = 2  # moves of the rollups not measured
# The bench asks each bridge once per move, seconds apart: this TTL never hides one.
PROBE_EVERY_S = "0.1"
FULL_READS = "poolscope_scheduler_bridge_refreshes_total"
# Every series written_by_rules serves, as Prometheus stores them.
WRITTEN = f'{{__name__=~"proxy_pool:.+|{FLEET_SERIES}"}}'


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


def written_by_rules(pools: int) -> list[Series]:
    """What the rules write for `pools` pools: every rollup, and the fleet series that
    says when (the Scheduler bridge's probe reads it)."""
    return [*fleet(pools), series(FLEET_SERIES, None, str(pools), "derived")]


@dataclass(frozen=True)
class Variant:
    """One bridge process: how it is started, and how it is called in the table."""

    label: str
    command: tuple[str, ...]  # after the interpreter
    cwd: Path = REPO
    flags: tuple[str, ...] = ()


@dataclass
class Measured:
    label: str
    times: list[float] = field(default_factory=list)
    cpu_s: float = 0.0  # the process' CPU over the measured requests
    body_bytes: int = 0
    full_reads: float = 0.0  # what its own refreshes_total counted, warm-up included


@dataclass
class Row:
    pools: int
    series: int
    raw: Measured
    bridges: list[Measured]
    cached: list[float]
    poll_interval_s: float


def p99(xs: Sequence[float]) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


async def _timed_get(session: aiohttp.ClientSession, url: str,
                     params: dict[str, str] | None = None) -> tuple[float, bytes]:
    started = time.perf_counter()
    async with session.get(url, params=params) as resp:
        body = await resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{url}: HTTP {resp.status}: {body[:300]!r}")
    return time.perf_counter() - started, body


@asynccontextmanager
async def bridge_process(prom_url: str, *flags: str,
                         checkout: Path | None = None) -> AsyncIterator[str]:
    """The bridge (of `checkout`, else of this tree) as its own process, as deployed,
    with `flags`; yields its base URL."""
    bridge = (Variant("bridge", ("-m", "poolscope.scheduler_bridge"), flags=flags)
              if checkout is None else
              Variant(f"baseline: {checkout}", _baseline_command(checkout), checkout, flags))
    async with _bridge(prom_url, bridge) as (url, _):
        yield url


@asynccontextmanager
async def _bridge(prom_url: str, variant: Variant
                  ) -> AsyncIterator[tuple[str, psutil.Process]]:
    """`variant` started over `prom_url`; its base URL and process (for its CPU time)."""
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *variant.command, "--prometheus-url", prom_url,
        "--listen", f"127.0.0.1:{port}", "--log-level", "WARNING", *variant.flags,
        cwd=variant.cwd, stdout=asyncio.subprocess.DEVNULL)
    try:
        await asyncio.to_thread(wait_http, f"http://127.0.0.1:{port}/healthz")
        yield f"http://127.0.0.1:{port}", psutil.Process(proc.pid)
    finally:
        proc.terminate()
        await proc.wait()


def _baseline_command(checkout: Path) -> tuple[str, ...]:
    """The bridge of `checkout` as a command after the interpreter."""
    root, module = import_root(checkout), module_name(checkout, "scheduler_bridge")
    return ("-c", f"import runpy, sys; sys.path.insert(0, {str(root)!r}); "
                  f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)")


def variants(evaluation_interval_s: float, baseline: Path | None) -> list[Variant]:
    aligned = ("--cache-ttl", PROBE_EVERY_S, "--evaluation-interval", f"{evaluation_interval_s:g}")
    out = [Variant("bridge", ("-m", "poolscope.scheduler_bridge"), flags=aligned),
           Variant("bridge, every answer parsed in full", ("-m", "bench.parsed_in_full"),
                   flags=aligned)]
    if baseline is not None:
        # Its own flags may differ: only what every version of the bridge takes.
        out.append(Variant(f"baseline: {baseline}", _baseline_command(baseline), baseline,
                           ("--cache-ttl", PROBE_EVERY_S)))
    return out


async def measure(pools: int, requests: int, workdir: Path, evaluation_interval_s: float,
                  poll_interval_s: float, baseline: Path | None) -> Row:
    vector = written_by_rules(pools)
    interval = f"{round(evaluation_interval_s * 1000)}ms"
    async with rollup_target(vector) as target:
        job = scrape_config("rollups", [target], interval=interval)
        # Recording rules aggregate by proxy_id and source: their series carry no
        # job/instance. Dropping them here stores exactly what the rules would.
        job["metric_relabel_configs"] = [{"action": "labeldrop", "regex": "instance|job"}]
        with running_prometheus(workdir / f"prom-{pools}", [job], rule_files=[]) as prom:
            await asyncio.to_thread(wait_for_series, prom, len(vector))
            # The same client for every side: kept-alive connections, identity
            # encoding (as the bridge asks Prometheus), the whole body read each time.
            async with AsyncExitStack() as stack:
                session = await stack.enter_async_context(aiohttp.ClientSession(
                    headers={"Accept-Encoding": "identity"}))
                started = [(v.label, *await stack.enter_async_context(_bridge(prom.url, v)))
                           for v in variants(evaluation_interval_s, baseline)]
                raw, bridges = await _after_each_move(session, prom.url, started, requests)
                cached = await _poll(session, started[0][1], requests, poll_interval_s)
    return Row(pools, len(vector), raw, bridges, cached, poll_interval_s)


def wait_for_series(prom: object, expected: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if len(prom.query(WRITTEN)) >= expected:  # type: ignore[attr-defined]
            return
        time.sleep(0.5)
    raise TimeoutError(f"Prometheus did not ingest {expected} series")


def _cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


async def _written_at(session: aiohttp.ClientSession, prom_url: str) -> str:
    """The rollups' timestamp, as Prometheus writes it (compared, never parsed)."""
    async with session.get(f"{prom_url}/api/v1/query",
                           params={"query": FLEET_EVALUATED_QUERY}) as resp:
        result = (await resp.json())["data"]["result"]
    return result[0]["value"][1] if result else ""


async def _after_each_move(session: aiohttp.ClientSession, prom_url: str,
                           bridges: list[tuple[str, str, psutil.Process]], requests: int
                           ) -> tuple[Measured, list[Measured]]:
    """After each move of the rollups: the raw query and one refresh of every bridge,
    in an order rotated per move so that none is always first after Prometheus wrote."""
    raw = Measured("raw query")
    measured = {url: Measured(label) for label, url, _ in bridges}
    for _, url, _ in bridges:  # the first full read, before any move
        await _timed_get(session, f"{url}{ROUTE}")
    seen = await _written_at(session, prom_url)
    steps: list[tuple[str, psutil.Process] | None] = [None, *((u, p) for _, u, p in bridges)]
    for i in range(requests + WARM_UP):
        while (written := await _written_at(session, prom_url)) == seen:
            await asyncio.sleep(0.02)
        seen = written
        for step in steps[i % len(steps):] + steps[:i % len(steps)]:
            if step is None:
                params = {"query": SNAPSHOT_QUERY, "time": f"{time.time():.3f}"}
                elapsed, body = await _timed_get(session, f"{prom_url}/api/v1/query", params)
                into = raw
            else:
                url, process = step
                cpu_from = _cpu_s(process)
                elapsed, body = await _timed_get(session, f"{url}{ROUTE}")
                into = measured[url]
                if i >= WARM_UP:
                    into.cpu_s += _cpu_s(process) - cpu_from
            if i >= WARM_UP:
                into.times.append(elapsed)
                into.body_bytes = len(body)
    for _, url, _ in bridges:
        _, page = await _timed_get(session, f"{url}/metrics")
        measured[url].full_reads = sum(float(line.rsplit(" ", 1)[1])
                                       for line in page.decode().splitlines()
                                       if line.startswith(FULL_READS + "{"))
    return raw, list(measured.values())


async def _poll(session: aiohttp.ClientSession, bridge_url: str, requests: int,
                interval: float) -> list[float]:
    """A Scheduler polling every `interval`: answers from memory, and a probe or a full
    read whenever one is due."""
    times: list[float] = []
    for i in range(requests + WARM_UP):
        started = time.perf_counter()
        elapsed, _ = await _timed_get(session, f"{bridge_url}{ROUTE}")
        if i >= WARM_UP:
            times.append(elapsed)
        await asyncio.sleep(max(0.0, interval - (time.perf_counter() - started)))
    return times


def table(rows: Sequence[Row], requests: int) -> str:
    lines = ["| pools | series | served by | median / p99 (ms) | raw query median / p99 (ms) "
             "| ratio median | median of paired ratios | body (KiB) | CPU / refresh "
             "| full reads |",
             "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        rm, rp = statistics.median(r.raw.times), p99(r.raw.times)
        # Each refresh against the raw query of its own window; polls have no such pair.
        cells = [(f"{b.label}, after each move", b.times, b.body_bytes,
                  f"{statistics.median(map(_ratio, b.times, r.raw.times)):.2f}x",
                  f"{b.cpu_s / requests * 1e3:.1f} ms", f"{b.full_reads:g}") for b in r.bridges]
        cells.append((f"{r.bridges[0].label}, polled every {r.poll_interval_s:g} s", r.cached,
                      r.bridges[0].body_bytes, "", "", ""))
        lines.append(f"| {r.pools} | {r.series} | raw query | {rm * 1e3:.1f} / {rp * 1e3:.1f} "
                     f"| | | | {r.raw.body_bytes // 1024} | | |")
        for label, times, body, paired, cpu, reads in cells:
            m, p = statistics.median(times), p99(times)
            lines.append(f"| {r.pools} | {r.series} | {label} | {m * 1e3:.1f} / {p * 1e3:.1f} "
                         f"| {rm * 1e3:.1f} / {rp * 1e3:.1f} | {m / rm:.2f}x | {paired} "
                         f"| {body // 1024} | {cpu} | {reads} |")
    return "\n".join(lines)


def _ratio(bridge_s: float, raw_s: float) -> float:
    return bridge_s / raw_s


async def run(pool_counts: Sequence[int], requests: int, evaluation_interval_s: float,
              poll_interval_s: float, baseline: Path | None) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="bench-scheduler-bridge-") as tmp:
        return [await measure(n, requests, Path(tmp), evaluation_interval_s, poll_interval_s,
                              baseline)
                for n in pool_counts]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--pools", default="10,100,1000",
                   help="comma-separated pool counts (default 10,100,1000)")
    p.add_argument("--requests", type=int, default=30,
                   help="measured moves of the rollups, and polls (default 30)")
    p.add_argument("--evaluation-interval", type=float, default=2.0,
                   help="seconds between moves of the rollups (default 2)")
    p.add_argument("--poll-interval", type=float, default=0.1,
                   help="seconds between polls of the cached bridge (default 0.1)")
    p.add_argument("--baseline", type=Path, default=None, metavar="DIR",
                   help="also the bridge of this source tree, side by side")
    args = p.parse_args(argv)
    rows = asyncio.run(run([int(n) for n in args.pools.split(",")], args.requests,
                           args.evaluation_interval, args.poll_interval, args.baseline))
    print(table(rows, args.requests))
    return 0


if __name__ == "__main__":
    unwind_on_sigterm()
    sys.exit(main())
