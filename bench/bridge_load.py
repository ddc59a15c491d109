"""The Scheduler bridge under many concurrent clients (issue 9, "Load").

    python -m bench.bridge_load [--clients 200] [--duration 30] [--pools 100] [--cache-ttl 1]

A real Prometheus scrapes a target serving every `proxy_pool:*` rollup of N pools;
the bridge runs as its own process in front of it, as deployed. N clients in a
closed loop (each sends its next request when the last answer is read, over its own
kept-alive connection) GET /debug/proxy_pool_resources until the duration or the
request budget runs out, so the run always ends by itself. Everything is loopback.

What must hold however many clients ask: zero errors (a non-200, a stale snapshot,
a broken or timed-out request) and at most one Prometheus refresh per cache TTL.
Refreshes are counted twice, independently: by the bridge's own
`poolscope_scheduler_bridge_refreshes_total`, and by Prometheus'
`prometheus_http_requests_total{handler="/api/v1/query"}` read from its /metrics
(not through the query API, which would count the reading itself).

The clients share one event loop in this process: past a few hundred requests a
second on a small machine their own scheduling is part of the latency measured, so
the latencies are an upper bound on what the bridge adds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from bench.rollup_target import rollup_target
from bench.scheduler_bridge import ROUTE, bridge_process, fleet, wait_for_series
from bench.teardown import unwind_on_sigterm
from tests.support.prometheus import (
    Prometheus,
    running_prometheus,
    scrape_config,
)

REQUEST_TIMEOUT_S = 10.0
# Connections the bridge accepts beyond one per client: this harness's own reads of
# its /metrics. Its default cap (64) refuses more clients than that with a 503, by
# design; a bridge in front of a fleet of Schedulers is started with a cap that fits.
SPARE_CONNECTIONS = 4
# The bridge's counters (scheduler_bridge/metrics.py) and Prometheus' own.
REFRESHES = "poolscope_scheduler_bridge_refreshes_total"
BACKEND_QUERIES = "poolscope_scheduler_bridge_backend_query_duration_seconds_count"
CACHE_LOOKUPS = "poolscope_scheduler_bridge_cache_requests_total"
PROMETHEUS_REQUESTS = "prometheus_http_requests_total"
QUERY_HANDLER = "/api/v1/query"


@dataclass
class Load:
    """What the clients saw: one latency per answered request, errors by kind."""

    latencies_s: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    wall_s: float = 0.0

    @property
    def requests(self) -> int:
        return len(self.latencies_s) + sum(self.errors.values())


@dataclass(frozen=True)
class Result:
    clients: int
    pools: int
    cache_ttl_s: float
    load: Load
    pools_served: int
    refreshes: float  # the bridge's refreshes_total, every outcome
    backend_queries: float  # the bridge's own count of queries it sent
    prometheus_queries: float  # what Prometheus counted on /api/v1/query
    cache_lookups: dict[str, float]

    @property
    def refresh_bound(self) -> int:
        """One refresh per TTL over the run, plus the one a run may start with."""
        return math.ceil(self.load.wall_s / self.cache_ttl_s) + 1


def counter_sum(exposition: str, sample: str, **labels: str) -> float:
    """Sum of every sample named `sample` whose labels include `labels`; 0 when none
    exists yet (prometheus_client shows a labelled counter only once it is used)."""
    return sum(s.value for family in text_string_to_metric_families(exposition)
               for s in family.samples
               if s.name == sample and labels.items() <= s.labels.items())


def by_label(exposition: str, sample: str, label: str) -> dict[str, float]:
    return {s.labels[label]: s.value for family in text_string_to_metric_families(exposition)
            for s in family.samples if s.name == sample}


def _answer_error(status: int, body: bytes) -> str | None:
    """Why an answer is not a fresh snapshot, or None. Only the envelope before
    "pools" is searched: the clients must not spend their loop parsing every body."""
    if status != 200:
        return f"HTTP {status}"
    head_end = body.find(b'"pools"')
    if head_end < 0:
        return "no pools in the answer"
    if b'"stale":false' not in body[:head_end]:
        return "stale snapshot"
    return None


async def closed_loop(url: str, clients: int, duration_s: float, max_requests: int) -> Load:
    """`clients` loops of request-then-read until `duration_s` or `max_requests`."""
    load = Load()
    budget = max_requests
    deadline = time.monotonic() + duration_s

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal budget
        while budget > 0 and time.monotonic() < deadline:
            budget -= 1  # one event loop: no other client runs between test and decrement
            started = time.perf_counter()
            try:
                async with session.get(url) as resp:
                    error = _answer_error(resp.status, await resp.read())
            except (aiohttp.ClientError, TimeoutError) as e:
                error = type(e).__name__
            if error is None:
                load.latencies_s.append(time.perf_counter() - started)
            else:
                load.errors[error] += 1

    # One connection per client, as that many Schedulers would hold.
    connector = aiohttp.TCPConnector(limit=clients)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        started = time.monotonic()
        await asyncio.gather(*(client(session) for _ in range(clients)))
        load.wall_s = time.monotonic() - started
    return load


@asynccontextmanager
async def prometheus_with_rollups(pools: int, workdir: Path) -> AsyncIterator[Prometheus]:
    """A Prometheus that has ingested every rollup of `pools` pools."""
    vector = fleet(pools)
    async with rollup_target(vector) as target:
        job = scrape_config("rollups", [target], interval="2s")
        # As the recording rules store them: aggregated away from job/instance.
        job["metric_relabel_configs"] = [{"action": "labeldrop", "regex": "instance|job"}]
        with running_prometheus(workdir, [job], rule_files=[]) as prom:
            await asyncio.to_thread(wait_for_series, prom, len(vector))
            yield prom


async def _text(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(url) as resp:
        resp.raise_for_status()
        return await resp.text()


async def run(clients: int, duration_s: float, pools: int, cache_ttl_s: float,
              max_requests: int, workdir: Path) -> Result:
    async with prometheus_with_rollups(pools, workdir) as prom, \
            bridge_process(prom.url, "--cache-ttl", f"{cache_ttl_s:g}", "--max-connections",
                           str(clients + SPARE_CONNECTIONS),
                           # every refresh is waited for: this counts refreshes and
                           # fresh answers, not how a late one is served
                           "--answer-within", "30") as bridge, \
            aiohttp.ClientSession() as session:
        prom_before = counter_sum(await _text(session, f"{prom.url}/metrics"),
                                  PROMETHEUS_REQUESTS, handler=QUERY_HANDLER)
        bridge_before = await _text(session, f"{bridge}/metrics")
        load = await closed_loop(f"{bridge}{ROUTE}", clients, duration_s, max_requests)
        # Every refresh has ended: each client awaited the one its request joined.
        prom_after = counter_sum(await _text(session, f"{prom.url}/metrics"),
                                 PROMETHEUS_REQUESTS, handler=QUERY_HANDLER)
        bridge_after = await _text(session, f"{bridge}/metrics")
        # Read after the counters: this request may itself start a refresh.
        pools_served = len(json.loads(await _text(session, f"{bridge}{ROUTE}"))["pools"])
    before_lookups = by_label(bridge_before, CACHE_LOOKUPS, "result")
    return Result(
        clients=clients, pools=pools, cache_ttl_s=cache_ttl_s, load=load,
        pools_served=pools_served,
        refreshes=counter_sum(bridge_after, REFRESHES) - counter_sum(bridge_before, REFRESHES),
        backend_queries=(counter_sum(bridge_after, BACKEND_QUERIES)
                         - counter_sum(bridge_before, BACKEND_QUERIES)),
        prometheus_queries=prom_after - prom_before,
        cache_lookups={k: v - before_lookups.get(k, 0.0)
                       for k, v in by_label(bridge_after, CACHE_LOOKUPS, "result").items()})


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile; 0 < q <= 1."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def verdicts(r: Result) -> list[str]:
    """What the run must show; empty when it does."""
    failed = []
    if r.load.errors:
        failed.append(f"errors: {dict(r.load.errors)}")
    if r.pools_served != r.pools:
        failed.append(f"served {r.pools_served} pools of {r.pools}")
    if r.refreshes > r.refresh_bound:
        failed.append(f"{r.refreshes:g} refreshes > {r.refresh_bound} (one per TTL)")
    if r.prometheus_queries != r.backend_queries:
        failed.append(f"Prometheus counted {r.prometheus_queries:g} queries, "
                      f"the bridge {r.backend_queries:g}")
    return failed


def table(r: Result) -> str:
    lat = r.load.latencies_s or [math.nan]
    lookups = ", ".join(f"{k} {v:g}" for k, v in sorted(r.cache_lookups.items()))
    rows = [
        ("clients (closed loop, one connection each)", f"{r.clients}"),
        ("pools / cache TTL", f"{r.pools} / {r.cache_ttl_s:g} s"),
        ("bridge --max-connections", f"{r.clients + SPARE_CONNECTIONS}"),
        ("wall time", f"{r.load.wall_s:.1f} s"),
        ("requests", f"{r.load.requests}"),
        ("errors", f"{sum(r.load.errors.values())} {dict(r.load.errors) or ''}".strip()),
        ("latency p50 / p99 / max", f"{percentile(lat, 0.5) * 1e3:.1f} / "
         f"{percentile(lat, 0.99) * 1e3:.1f} / {max(lat) * 1e3:.1f} ms"),
        ("throughput", f"{r.load.requests / r.load.wall_s:.0f} req/s"),
        ("refreshes (bridge refreshes_total)", f"{r.refreshes:g}"),
        ("queries Prometheus answered (its /api/v1/query counter)",
         f"{r.prometheus_queries:g}"),
        ("bound: ceil(wall / TTL) + 1", f"{r.refresh_bound}"),
        ("cache lookups", lookups),
    ]
    return "\n".join(["| measure | value |", "|---|---:|",
                      *(f"| {name} | {value} |" for name, value in rows)])


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bridge_load",
                                description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--clients", type=int, default=200, help="concurrent clients (default 200)")
    p.add_argument("--duration", type=float, default=30.0, help="seconds of load (default 30)")
    p.add_argument("--pools", type=int, default=100, help="pools in Prometheus (default 100)")
    p.add_argument("--cache-ttl", type=float, default=1.0, help="the bridge's --cache-ttl")
    p.add_argument("--max-requests", type=int, default=1_000_000,
                   help="stop after this many requests even before --duration")
    a = p.parse_args(argv)
    if a.clients < 1 or a.duration <= 0 or a.pools < 1 or a.cache_ttl <= 0:
        p.error("--clients, --duration, --pools and --cache-ttl must be positive")
    with tempfile.TemporaryDirectory(prefix="bench-bridge-load-") as tmp:
        result = asyncio.run(run(a.clients, a.duration, a.pools, a.cache_ttl,
                                 a.max_requests, Path(tmp)))
    print(table(result))
    failed = verdicts(result)
    print("\nall targets met" if not failed else "\nMISSED: " + "; ".join(failed))
    return 0 if not failed else 1


if __name__ == "__main__":
    unwind_on_sigterm()
    sys.exit(main())
