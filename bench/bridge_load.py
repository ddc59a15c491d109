"""The Scheduler bridge under many concurrent clients.

    python -m bench.bridge_load [--clients 200] [--duration 30] [--pools 100]
                                [--cache-ttl 1] [--evaluation-interval 5] [--interval S]

A real Prometheus scrapes a target serving every `proxy_pool:*` rollup of N pools
every --evaluation-interval seconds, as the rules would write them; the bridge runs
as its own process in front of it, as deployed, told that interval. N clients, each
over its own kept-alive connection, GET /debug/proxy_pool_resources until the
duration or the request budget runs out, so the run always ends by itself: in a
closed loop (each sends its next request when the last answer is read: the most the
bridge can serve), or with --interval, each once every S seconds (a fleet of
Schedulers polling: what one answer costs). Everything is loopback.

What must hold however many clients ask: zero errors (a non-200, a stale snapshot,
a broken or timed-out request), at most one full read per evaluation of the rules
and at most one backend round (a probe or a full read) per cache TTL. Queries are
counted twice, independently: by the bridge's own counters, and by Prometheus'
`prometheus_http_requests_total{handler="/api/v1/query"}` read from its /metrics
(not through the query API, which would count the reading itself). Paced, the p99
of the answers served from memory (all but those that waited for a full read) must
stay under 5 ms; the p99 of all answers is shown beside it.

The clients share one event loop in this process: past a few hundred requests a
second on a small machine their own scheduling is part of the latency measured, so
the latencies are an upper bound on what the bridge adds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
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
# The paced clients' target for an answer from memory: no full read on its way.
PACED_P99_S = 0.005
# Connections the bridge accepts beyond one per client: this harness's own reads of
# its /metrics. Its default cap (64) refuses more clients than that with a 503, by
# design; a bridge in front of a fleet of Schedulers is started with a cap that fits.
SPARE_CONNECTIONS = 4
# The bridge's counters (bridge/metrics.py) and Prometheus' own.
REFRESHES = "poolscope_scheduler_bridge_refreshes_total"
PROBES = "poolscope_scheduler_bridge_probes_total"
BACKEND_QUERIES = "poolscope_scheduler_bridge_backend_query_duration_seconds_count"
CACHE_LOOKUPS = "poolscope_scheduler_bridge_cache_requests_total"
PROMETHEUS_REQUESTS = "prometheus_http_requests_total"
QUERY_HANDLER = "/api/v1/query"


@dataclass(frozen=True)
class Answer:
    started: float  # perf_counter seconds
    finished: float
    generated_at: bytes  # the snapshot's, as the envelope writes it


@dataclass
class Load:
    """What the clients saw: every answered request, errors by kind."""

    answers: list[Answer] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    wall_s: float = 0.0
    # The snapshot served before the clients started, and when that was known.
    first_snapshot: tuple[bytes, float] = (b"", 0.0)

    @property
    def requests(self) -> int:
        return len(self.answers) + sum(self.errors.values())

    @property
    def latencies_s(self) -> list[float]:
        return [a.finished - a.started for a in self.answers]

    def from_memory_s(self) -> list[float]:
        """The latencies of answers that did not wait for a full read: a request sent
        before any answer carried its snapshot was waiting for that snapshot's read."""
        known = dict([self.first_snapshot])
        for a in self.answers:
            known[a.generated_at] = min(known.get(a.generated_at, math.inf), a.finished)
        return [a.finished - a.started for a in self.answers
                if a.started >= known[a.generated_at]]


@dataclass(frozen=True)
class Shape:
    """What is measured: the fleet, the bridge's cache, and how the clients ask."""

    clients: int
    pools: int
    cache_ttl_s: float = 1.0
    evaluation_interval_s: float = 5.0
    interval_s: float | None = None  # each client's period; None: a closed loop
    duration_s: float = 30.0
    max_requests: int = 1_000_000


@dataclass(frozen=True)
class Result:
    shape: Shape
    load: Load
    pools_served: int
    refreshes: float  # the bridge's full reads (refreshes_total), every outcome
    probes: float  # its probes of the rollups' timestamp, every outcome
    backend_queries: float  # the bridge's own count of queries it sent
    prometheus_queries: float  # what Prometheus counted on /api/v1/query
    cache_lookups: dict[str, float]

    @property
    def refresh_bound(self) -> int:
        """One full read per evaluation over the run, plus the one it starts with."""
        return math.ceil(self.load.wall_s / self.shape.evaluation_interval_s) + 1

    @property
    def rounds(self) -> float:
        """Backend rounds: every probe, and every full read no probe led to."""
        return sum(self.probes.values()) + self.refreshes - self.probes.get("moved", 0.0)

    @property
    def round_bound(self) -> int:
        """One backend round (a probe or a full read) per TTL, plus the first."""
        return math.ceil(self.load.wall_s / self.shape.cache_ttl_s) + 1


def counter_sum(exposition: str, sample: str, **labels: str) -> float:
    """Sum of every sample named `sample` whose labels include `labels`; 0 when none
    exists yet (prometheus_client shows a labelled counter only once it is used)."""
    return sum(s.value for family in text_string_to_metric_families(exposition)
               for s in family.samples
               if s.name == sample and labels.items() <= s.labels.items())


def by_label(exposition: str, sample: str, label: str) -> dict[str, float]:
    return {s.labels[label]: s.value for family in text_string_to_metric_families(exposition)
            for s in family.samples if s.name == sample}


_GENERATED_AT = re.compile(rb'"generated_at":([^,}]*)')


def _answer_error(status: int, body: bytes) -> str | bytes:
    """Why an answer is not a fresh snapshot, or its generated_at. Only the envelope
    before "pools" is searched: the clients must not spend their loop parsing bodies."""
    if status != 200:
        return f"HTTP {status}"
    head = body[:body.find(b'"pools"')]
    generated = _GENERATED_AT.search(head)
    if generated is None:
        return "no snapshot in the answer"
    if b'"stale":false' not in head:
        return "stale snapshot"
    return generated.group(1)


async def clients_loop(url: str, shape: Shape, first_snapshot: bytes) -> Load:
    """`shape.clients` loops of request-then-read, back to back or one per
    `shape.interval_s` (phases spread over the period), until the duration or the
    request budget runs out; `first_snapshot` is the one served before."""
    load = Load(first_snapshot=(first_snapshot, time.perf_counter()))
    budget = shape.max_requests
    deadline = time.monotonic() + shape.duration_s

    async def client(session: aiohttp.ClientSession, phase: float) -> None:
        nonlocal budget
        next_at = time.monotonic() + phase
        while budget > 0 and time.monotonic() < deadline:
            if shape.interval_s is not None:
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                next_at += shape.interval_s
            budget -= 1  # one event loop: no other client runs between test and decrement
            started = time.perf_counter()
            try:
                async with session.get(url) as resp:
                    seen = _answer_error(resp.status, await resp.read())
            except (aiohttp.ClientError, TimeoutError) as e:
                seen = type(e).__name__
            if isinstance(seen, bytes):
                load.answers.append(Answer(started, time.perf_counter(), seen))
            else:
                load.errors[seen] += 1

    # One connection per client, as that many Schedulers would hold.
    connector = aiohttp.TCPConnector(limit=shape.clients)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    period = shape.interval_s or 0.0
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        started = time.monotonic()
        await asyncio.gather(*(client(session, period * i / shape.clients)
                               for i in range(shape.clients)))
        load.wall_s = time.monotonic() - started
    return load


@asynccontextmanager
async def prometheus_with_rollups(pools: int, workdir: Path,
                                  interval_s: float) -> AsyncIterator[Prometheus]:
    """A Prometheus that has ingested every rollup of `pools` pools, written anew
    every `interval_s` as the rules would."""
    vector = fleet(pools)
    async with rollup_target(vector) as target:
        job = scrape_config("rollups", [target], interval=f"{round(interval_s * 1000)}ms")
        # As the recording rules store them: aggregated away from job/instance.
        job["metric_relabel_configs"] = [{"action": "labeldrop", "regex": "instance|job"}]
        with running_prometheus(workdir, [job], rule_files=[]) as prom:
            await asyncio.to_thread(wait_for_series, prom, len(vector))
            yield prom


async def _text(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(url) as resp:
        resp.raise_for_status()
        return await resp.text()


async def run(shape: Shape, workdir: Path) -> Result:
    async with prometheus_with_rollups(shape.pools, workdir,
                                       shape.evaluation_interval_s) as prom, \
            bridge_process(prom.url, "--cache-ttl", f"{shape.cache_ttl_s:g}",
                           "--evaluation-interval", f"{shape.evaluation_interval_s:g}",
                           "--max-connections", str(shape.clients + SPARE_CONNECTIONS),
                           # every refresh is waited for: this counts refreshes and
                           # fresh answers, not how a late one is served
                           "--answer-within", "30") as bridge, \
            aiohttp.ClientSession() as session:
        # The first full read, before the clients: what they measure is the cache.
        async with session.get(f"{bridge}{ROUTE}") as resp:
            first = _answer_error(resp.status, await resp.read())
        if not isinstance(first, bytes):
            raise RuntimeError(f"the bridge's first answer: {first}")
        prom_before = counter_sum(await _text(session, f"{prom.url}/metrics"),
                                  PROMETHEUS_REQUESTS, handler=QUERY_HANDLER)
        bridge_before = await _text(session, f"{bridge}/metrics")
        load = await clients_loop(f"{bridge}{ROUTE}", shape, first)
        # Every refresh has ended: each client awaited the one its request joined.
        prom_after = counter_sum(await _text(session, f"{prom.url}/metrics"),
                                 PROMETHEUS_REQUESTS, handler=QUERY_HANDLER)
        bridge_after = await _text(session, f"{bridge}/metrics")
        # Read after the counters: this request may itself start a refresh.
        pools_served = len(json.loads(await _text(session, f"{bridge}{ROUTE}"))["pools"])

    def delta(sample: str, label: str) -> dict[str, float]:
        before = by_label(bridge_before, sample, label)
        return {k: v - before.get(k, 0.0) for k, v in by_label(bridge_after, sample, label).items()}

    return Result(
        shape=shape, load=load, pools_served=pools_served,
        refreshes=sum(delta(REFRESHES, "outcome").values()),
        probes=delta(PROBES, "outcome"),
        backend_queries=(counter_sum(bridge_after, BACKEND_QUERIES)
                         - counter_sum(bridge_before, BACKEND_QUERIES)),
        prometheus_queries=prom_after - prom_before,
        cache_lookups=delta(CACHE_LOOKUPS, "result"))


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile; 0 < q <= 1."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def verdicts(r: Result) -> list[str]:
    """What the run must show; empty when it does."""
    failed = []
    if r.load.errors:
        failed.append(f"errors: {dict(r.load.errors)}")
    if r.pools_served != r.shape.pools:
        failed.append(f"served {r.pools_served} pools of {r.shape.pools}")
    if r.refreshes > r.refresh_bound:
        failed.append(f"{r.refreshes:g} full reads > {r.refresh_bound} (one per evaluation)")
    if r.rounds > r.round_bound:
        failed.append(f"{r.rounds:g} probes and full reads > {r.round_bound} (one per TTL)")
    if r.prometheus_queries != r.backend_queries:
        failed.append(f"Prometheus counted {r.prometheus_queries:g} queries, "
                      f"the bridge {r.backend_queries:g}")
    p99 = percentile(r.load.from_memory_s() or [math.inf], 0.99)
    if r.shape.interval_s is not None and p99 > PACED_P99_S:
        failed.append(f"answers from memory: p99 {p99 * 1e3:.1f} ms > {PACED_P99_S * 1e3:g} ms")
    return failed


def table(r: Result) -> str:
    lat = r.load.latencies_s or [math.nan]
    memory = r.load.from_memory_s()
    shape = r.shape
    asking = ("closed loop" if shape.interval_s is None
              else f"each every {shape.interval_s:g} s")
    rows = [
        (f"clients ({asking}, one connection each)", f"{shape.clients}"),
        ("pools / evaluation interval / cache TTL",
         f"{shape.pools} / {shape.evaluation_interval_s:g} s / {shape.cache_ttl_s:g} s"),
        ("bridge --max-connections", f"{shape.clients + SPARE_CONNECTIONS}"),
        ("wall time", f"{r.load.wall_s:.1f} s"),
        ("requests", f"{r.load.requests}"),
        ("errors", f"{sum(r.load.errors.values())} {dict(r.load.errors) or ''}".strip()),
        ("latency p50 / p99 / max", _spread(lat)),
        (f"answers from memory ({len(memory)}: none waited for a full read), "
         "p50 / p99 / max", _spread(memory or [math.nan])),
        ("throughput", f"{r.load.requests / r.load.wall_s:.0f} req/s"),
        ("full reads (bridge refreshes_total) / bound ceil(wall / evaluation) + 1",
         f"{r.refreshes:g} / {r.refresh_bound}"),
        ("probes (bridge probes_total)", _by_key(r.probes)),
        ("probes and full reads / bound ceil(wall / TTL) + 1", f"{r.rounds:g} / {r.round_bound}"),
        ("queries Prometheus answered (its /api/v1/query counter)",
         f"{r.prometheus_queries:g}"),
        ("cache lookups", _by_key(r.cache_lookups)),
    ]
    return "\n".join(["| measure | value |", "|---|---:|",
                      *(f"| {name} | {value} |" for name, value in rows)])


def _spread(latencies: Sequence[float]) -> str:
    return (f"{percentile(latencies, 0.5) * 1e3:.1f} / {percentile(latencies, 0.99) * 1e3:.1f}"
            f" / {max(latencies) * 1e3:.1f} ms")


def _by_key(counts: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:g}" for k, v in sorted(counts.items())) or "none"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bridge_load",
                                description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--clients", type=int, default=200, help="concurrent clients (default 200)")
    p.add_argument("--duration", type=float, default=30.0, help="seconds of load (default 30)")
    p.add_argument("--pools", type=int, default=100, help="pools in Prometheus (default 100)")
    p.add_argument("--cache-ttl", type=float, default=1.0, help="the bridge's --cache-ttl")
    p.add_argument("--evaluation-interval", type=float, default=5.0,
                   help="seconds between new rollups, and the bridge's --evaluation-interval")
    p.add_argument("--interval", type=float, default=None,
                   help="each client asks once every S seconds (default: a closed loop)")
    p.add_argument("--max-requests", type=int, default=1_000_000,
                   help="stop after this many requests even before --duration")
    a = p.parse_args(argv)
    if a.clients < 1 or a.duration <= 0 or a.pools < 1 or a.cache_ttl <= 0 or (
            a.evaluation_interval <= 0 or (a.interval is not None and a.interval <= 0)):
        p.error("--clients, --duration, --pools, --cache-ttl, --evaluation-interval and "
                "--interval must be positive")
    shape = Shape(a.clients, a.pools, a.cache_ttl, a.evaluation_interval, a.interval,
                  a.duration, a.max_requests)
    with tempfile.TemporaryDirectory(prefix="bench-bridge-load-") as tmp:
        result = asyncio.run(run(shape, Path(tmp)))
    print(table(result))
    failed = verdicts(result)
    print("\nall targets met" if not failed else "\nMISSED: " + "; ".join(failed))
    return 0 if not failed else 1


if __name__ == "__main__":
    unwind_on_sigterm()
    sys.exit(main())
