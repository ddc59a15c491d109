"""The Scheduler bridge under many concurrent clients, side by side with another tree's.

    python -m bench.bridge_load [--clients 200] [--duration 30] [--pools 100]
                                [--cache-ttl 1] [--evaluation-interval 5] [--interval S]
                                [--query-shards N] [--query-timeout S] [--plain]
                                [--baseline DIR [--turns N]]

A real Prometheus scrapes a target serving every `proxy_pool:*` rollup of N pools
every --evaluation-interval seconds, as the rules would write them; the bridge runs
as its own process in front of it, as deployed, told that interval. N clients, each
over its own kept-alive connection, GET /debug/proxy_pool_resources until the
duration or the request budget runs out, so the run always ends by itself: in a
closed loop (each sends its next request when the last answer is read: the most the
bridge can serve), or with --interval, each once every S seconds (a fleet of
Schedulers polling: what one answer costs). Everything is loopback.

The clients ask as the typed client does (scheduler_bridge/client.py): Accept-Encoding
gzip, and If-None-Match with the ETag of the last body they read, so a snapshot they
hold costs a 304; with --plain they ask for identity and never revalidate, as a
client from before ETags did. Every byte the bridge sends (status line, headers, body
as sent) is counted per client per minute.

With --baseline DIR (a source tree, e.g. `git archive`d from an earlier commit) that
tree's bridge runs over the same Prometheus at the same time, and the clients ask the
two in turns: --turns turns of --duration seconds each, the order rotated every
round, so both are measured in the same window of a shared machine; the table puts
them side by side with their ratios.

What must hold however many clients ask: zero errors (a non-200 other than a 304 for
the body the client holds, a stale snapshot, a broken or timed-out request), at most
one full read per evaluation of the rules and at most one backend round (a probe or a
full read) per cache TTL. Queries are counted twice, independently: by the bridge's
own counters, and by Prometheus' `prometheus_http_requests_total{handler="/api/v1/query"}`
read from its /metrics (not through the query API, which would count the reading
itself). Paced, the p99 of the answers served from memory (all but those that waited
for a full read) must stay under 5 ms; the p99 of all answers is shown beside it, and
the slowest answer that waited for a full read (what a refresh costs a client).

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
import zlib
from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from bench.scheduler_bridge import ROUTE, bridge_process, wait_for_series, written_by_rules
from bench.teardown import unwind_on_sigterm
from harness.prometheus import (
    Prometheus,
    running_prometheus,
    scrape_config,
)
from harness.rollup_target import rollup_target

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
PROCESS_CPU = "process_cpu_seconds_total"
# The bridge's own timing of each answer: its 304s are answers from memory (or after a
# probe that found nothing new), timed without the clients' loop and the kernel.
ANSWERED = "poolscope_scheduler_bridge_request_duration_seconds"
NOT_MODIFIED_WITHIN = ("0.005", "0.05")  # buckets of its histogram
PROMETHEUS_REQUESTS = "prometheus_http_requests_total"
QUERY_HANDLER = "/api/v1/query"
THIS_TREE = "this tree"
# Enough of a body to hold the envelope before "pools", decompressed if need be.
HEAD_BYTES = 512


@dataclass(frozen=True)
class Answer:
    started: float  # perf_counter seconds
    finished: float
    generated_at: bytes  # the snapshot's, as the envelope writes it


@dataclass
class Load:
    """What the clients saw, over every turn: every answer, errors by kind, bytes."""

    answers: list[Answer] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    statuses: Counter[int] = field(default_factory=Counter)
    wall_s: float = 0.0
    bytes_received: int = 0  # status lines, headers and bodies, as sent
    # Snapshots served before the clients of a turn started, and when that was known.
    primed: dict[bytes, float] = field(default_factory=dict)

    @property
    def requests(self) -> int:
        return len(self.answers) + sum(self.errors.values())

    @property
    def latencies_s(self) -> list[float]:
        return [a.finished - a.started for a in self.answers]

    def _known(self) -> dict[bytes, float]:
        """When each snapshot was first seen answered."""
        known = dict(self.primed)
        for a in self.answers:
            known[a.generated_at] = min(known.get(a.generated_at, math.inf), a.finished)
        return known

    def from_memory_s(self) -> list[float]:
        """The latencies of answers that did not wait for a full read: a request sent
        before any answer carried its snapshot was waiting for that snapshot's read."""
        known = self._known()
        return [a.finished - a.started for a in self.answers
                if a.started >= known[a.generated_at]]

    def waited_s(self) -> list[float]:
        """The latencies of the answers that waited for a full read."""
        known = self._known()
        return [a.finished - a.started for a in self.answers
                if a.started < known[a.generated_at]]


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
    revalidate: bool = True  # gzip and If-None-Match, as the typed client asks
    query_shards: int = 1  # the bridge's --query-shards
    query_timeout_s: float = 5.0  # the bridge's --query-timeout


@dataclass(frozen=True)
class Result:
    shape: Shape
    load: Load
    pools_served: int
    refreshes: float  # the bridge's full reads (refreshes_total), every outcome
    probes: dict[str, float]  # its probes of the rollups' timestamp, by outcome
    backend_queries: float  # the bridge's own count of queries it sent
    prometheus_queries: float  # what Prometheus counted on /api/v1/query
    cache_lookups: dict[str, float]
    label: str = THIS_TREE
    turns: int = 1  # the turns the clients took on this bridge
    cpu_s: float = 0.0  # the bridge process' CPU while its clients asked
    # The 304s the bridge answered, and within each of NOT_MODIFIED_WITHIN, by its own
    # timing.
    not_modified: float = 0.0
    not_modified_within: tuple[float, ...] = ()

    @property
    def refresh_bound(self) -> int:
        """One full read per evaluation over the run, plus the one each turn starts
        with and one per turn for its last evaluation, cut short."""
        return (math.ceil(self.load.wall_s / self.shape.evaluation_interval_s)
                + 2 * self.turns - 1)

    @property
    def rounds(self) -> float:
        """Backend rounds: every probe, and every full read no probe led to."""
        return sum(self.probes.values()) + self.refreshes - self.probes.get("moved", 0.0)

    @property
    def round_bound(self) -> int:
        """One backend round (a probe or a full read) per TTL, plus the first (and a
        cut-short TTL) of each turn."""
        return math.ceil(self.load.wall_s / self.shape.cache_ttl_s) + 2 * self.turns - 1

    @property
    def bytes_per_client_minute(self) -> float:
        return self.load.bytes_received / self.shape.clients / (self.load.wall_s / 60)


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


def _envelope(body: bytes, coding: str | None) -> bytes:
    """The body up to "pools", decompressed if need be: the clients must not spend
    their loop decoding whole bodies."""
    head = (zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(body, HEAD_BYTES)
            if coding == "gzip" else body[:HEAD_BYTES])
    return head[:head.find(b'"pools"')]


def _answer_error(status: int, headers: Mapping[str, str], body: bytes,
                  held: tuple[str, bytes] | None) -> str | bytes:
    """Why an answer is not a fresh snapshot, or its generated_at. A 304 is the body
    the client `held` (its ETag and generated_at), fresh as its headers say."""
    if status == 304:
        if held is None or headers.get("ETag") != held[0]:
            return "304 for a body not held"
        return held[1] if headers.get("X-Poolscope-Stale") == "false" else "stale snapshot"
    if status != 200:
        return f"HTTP {status}"
    head = _envelope(body, headers.get("Content-Encoding"))
    generated = _GENERATED_AT.search(head)
    if generated is None:
        return "no snapshot in the answer"
    if b'"stale":false' not in head:
        return "stale snapshot"
    return generated.group(1)


def _wire_bytes(resp: aiohttp.ClientResponse, body: bytes) -> int:
    """What the bridge sent: the status line, every header line, the blank line, the
    body as sent (auto_decompress is off)."""
    status_line = len(f"HTTP/1.1 {resp.status} {resp.reason}\r\n")
    return status_line + sum(len(k) + len(v) + 4 for k, v in resp.raw_headers) + 2 + len(body)


async def clients_loop(url: str, shape: Shape, load: Load) -> None:
    """`shape.clients` loops of request-then-read, back to back or one per
    `shape.interval_s` (phases spread over the period), until the duration or the
    request budget runs out; what they see is added to `load`."""
    budget = shape.max_requests
    deadline = time.monotonic() + shape.duration_s
    asked = {"Accept-Encoding": "gzip" if shape.revalidate else "identity"}

    async def client(session: aiohttp.ClientSession, phase: float) -> None:
        nonlocal budget
        held: tuple[str, bytes] | None = None  # the ETag and generated_at of the last body
        next_at = time.monotonic() + phase
        while budget > 0 and time.monotonic() < deadline:
            if shape.interval_s is not None:
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                next_at += shape.interval_s
            budget -= 1  # one event loop: no other client runs between test and decrement
            headers = asked if held is None else {**asked, "If-None-Match": held[0]}
            etag: str | None = None
            started = time.perf_counter()
            try:
                async with session.get(url, headers=headers) as resp:
                    body = await resp.read()
                    seen = _answer_error(resp.status, resp.headers, body, held)
                    load.bytes_received += _wire_bytes(resp, body)
                    load.statuses[resp.status] += 1
                    etag = resp.headers.get("ETag")
            except (aiohttp.ClientError, TimeoutError) as e:
                seen = type(e).__name__
            if isinstance(seen, bytes):
                load.answers.append(Answer(started, time.perf_counter(), seen))
                if shape.revalidate and etag is not None:
                    held = (etag, seen)
            else:
                load.errors[seen] += 1

    # One connection per client, as that many Schedulers would hold.
    connector = aiohttp.TCPConnector(limit=shape.clients)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    period = shape.interval_s or 0.0
    async with aiohttp.ClientSession(connector=connector, timeout=timeout,
                                     auto_decompress=False) as session:
        started = time.monotonic()
        await asyncio.gather(*(client(session, period * i / shape.clients)
                               for i in range(shape.clients)))
        load.wall_s += time.monotonic() - started


@asynccontextmanager
async def prometheus_with_rollups(pools: int, workdir: Path,
                                  interval_s: float) -> AsyncIterator[Prometheus]:
    """A Prometheus that has ingested every rollup of `pools` pools, written anew
    every `interval_s` as the rules would."""
    vector = written_by_rules(pools)
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


@dataclass
class _Side:
    """One bridge under test and what its rounds added up to."""

    label: str
    url: str
    load: Load = field(default_factory=Load)
    counters: Counter[str] = field(default_factory=Counter)
    prometheus_queries: float = 0.0


def _deltas(before: str, after: str) -> Counter[str]:
    """What the bridge's counters moved by, keyed "sample" or "sample:label value"."""
    out: Counter[str] = Counter()
    for sample, label in ((REFRESHES, "outcome"), (PROBES, "outcome"),
                          (CACHE_LOOKUPS, "result")):
        was = by_label(before, sample, label)
        for key, value in by_label(after, sample, label).items():
            out[f"{sample}:{key}"] += value - was.get(key, 0.0)
    for sample in (BACKEND_QUERIES, PROCESS_CPU):
        out[sample] += counter_sum(after, sample) - counter_sum(before, sample)
    for sample, labels in ((f"{ANSWERED}_count", {}),
                           *((f"{ANSWERED}_bucket", {"le": le}) for le in NOT_MODIFIED_WITHIN)):
        key = ":".join((sample, *labels.values()))
        out[key] += (counter_sum(after, sample, route=ROUTE, status="304", **labels)
                     - counter_sum(before, sample, route=ROUTE, status="304", **labels))
    return out


def _by(counters: Counter[str], sample: str) -> dict[str, float]:
    prefix = f"{sample}:"
    return {k[len(prefix):]: v for k, v in counters.items() if k.startswith(prefix)}


async def run(shape: Shape, workdir: Path) -> Result:
    """This tree's bridge under `shape`."""
    return (await side_by_side(shape, workdir, None, 1))[0]


async def side_by_side(shape: Shape, workdir: Path, baseline: Path | None,
                       turns: int) -> list[Result]:
    """This tree's bridge and `baseline`'s (when given) over one Prometheus, each asked
    for `turns` turns of `shape.duration_s`, in an order rotated every round: this
    tree's result first."""
    flags = ("--cache-ttl", f"{shape.cache_ttl_s:g}",
             "--evaluation-interval", f"{shape.evaluation_interval_s:g}",
             "--max-connections", str(shape.clients + SPARE_CONNECTIONS),
             "--query-shards", str(shape.query_shards),
             "--query-timeout", f"{shape.query_timeout_s:g}",
             # every refresh is waited for: this counts refreshes and fresh answers,
             # not how a late one is served
             "--answer-within", "30")
    async with prometheus_with_rollups(shape.pools, workdir,
                                       shape.evaluation_interval_s) as prom, \
            AsyncExitStack() as stack:
        sides = [_Side(THIS_TREE, await stack.enter_async_context(
            bridge_process(prom.url, *flags)))]
        if baseline is not None:
            sides.append(_Side(f"baseline {baseline}", await stack.enter_async_context(
                bridge_process(prom.url, *flags, checkout=baseline))))
        session = await stack.enter_async_context(aiohttp.ClientSession())
        for i in range(turns):
            for side in sides[i % len(sides):] + sides[:i % len(sides)]:
                await _turn(session, prom.url, side, shape)
        # Read after the counters: this request may itself start a refresh.
        served = [len(json.loads(await _text(session, f"{s.url}{ROUTE}"))["pools"])
                  for s in sides]
    return [Result(shape=shape, load=s.load, pools_served=n,
                   refreshes=sum(_by(s.counters, REFRESHES).values()),
                   probes=_by(s.counters, PROBES),
                   backend_queries=s.counters[BACKEND_QUERIES],
                   prometheus_queries=s.prometheus_queries,
                   cache_lookups=_by(s.counters, CACHE_LOOKUPS),
                   label=s.label, turns=turns, cpu_s=s.counters[PROCESS_CPU],
                   not_modified=s.counters[f"{ANSWERED}_count"],
                   not_modified_within=tuple(s.counters[f"{ANSWERED}_bucket:{le}"]
                                             for le in NOT_MODIFIED_WITHIN))
            for s, n in zip(sides, served, strict=True)]


async def _turn(session: aiohttp.ClientSession, prom_url: str, side: _Side,
                shape: Shape) -> None:
    """One turn of the clients on `side`'s bridge, counted on both ends."""
    # A first answer before the clients: what they measure is the cache.
    async with session.get(f"{side.url}{ROUTE}", headers={"Accept-Encoding": "identity"}
                           ) as resp:
        first = _answer_error(resp.status, resp.headers, await resp.read(), None)
    if not isinstance(first, bytes):
        raise RuntimeError(f"{side.label}'s first answer: {first}")
    side.load.primed.setdefault(first, time.perf_counter())
    prom_before = counter_sum(await _text(session, f"{prom_url}/metrics"),
                              PROMETHEUS_REQUESTS, handler=QUERY_HANDLER)
    bridge_before = await _text(session, f"{side.url}/metrics")
    await clients_loop(f"{side.url}{ROUTE}", shape, side.load)
    # Every refresh has ended: each client awaited the one its request joined.
    side.prometheus_queries += counter_sum(await _text(session, f"{prom_url}/metrics"),
                                           PROMETHEUS_REQUESTS,
                                           handler=QUERY_HANDLER) - prom_before
    side.counters += _deltas(bridge_before, await _text(session, f"{side.url}/metrics"))


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
    how = "gzip and If-None-Match" if shape.revalidate else "identity, no If-None-Match"
    rows = [
        ("bridge", r.label),
        (f"clients ({asking}, {how}, one connection each)", f"{shape.clients}"),
        ("pools / evaluation interval / cache TTL / query shards",
         f"{shape.pools} / {shape.evaluation_interval_s:g} s / {shape.cache_ttl_s:g} s / "
         f"{shape.query_shards}"),
        ("bridge --max-connections", f"{shape.clients + SPARE_CONNECTIONS}"),
        ("wall time (turns)", f"{r.load.wall_s:.1f} s ({r.turns})"),
        ("requests", f"{r.load.requests}"),
        ("answers by status", _by_key({str(k): v for k, v in r.load.statuses.items()})),
        ("errors", f"{sum(r.load.errors.values())} {dict(r.load.errors) or ''}".strip()),
        ("latency p50 / p99 / max", _spread(lat)),
        (f"answers from memory ({len(memory)}: none waited for a full read), "
         "p50 / p99 / max", _spread(memory or [math.nan])),
        ("answers that waited for a full read, p50 / p99 / max",
         _spread(r.load.waited_s() or [math.nan])),
        ("304s the bridge took at most 5 ms / 50 ms over, by its own timing",
         " / ".join(f"{n / r.not_modified:.2%}" if r.not_modified else "-"
                    for n in r.not_modified_within)),
        ("throughput", f"{r.load.requests / r.load.wall_s:.0f} req/s"),
        ("bytes sent per client per minute", f"{r.bytes_per_client_minute:,.0f}"),
        ("bridge CPU (its process_cpu_seconds_total), % of a core",
         f"{r.cpu_s / r.load.wall_s * 100:.1f}"),
        ("full reads (bridge refreshes_total) / bound ceil(wall / evaluation) + 2 turns - 1",
         f"{r.refreshes:g} / {r.refresh_bound}"),
        ("probes (bridge probes_total)", _by_key(r.probes)),
        ("probes and full reads / bound ceil(wall / TTL) + 2 turns - 1",
         f"{r.rounds:g} / {r.round_bound}"),
        ("queries Prometheus answered (its /api/v1/query counter)",
         f"{r.prometheus_queries:g}"),
        ("cache lookups", _by_key(r.cache_lookups)),
    ]
    return "\n".join(["| measure | value |", "|---|---:|",
                      *(f"| {name} | {value} |" for name, value in rows)])


def comparison(this: Result, baseline: Result) -> str:
    """The two bridges of one run side by side, and this tree's over the baseline's."""
    def p99(values: list[float]) -> float:
        return percentile(values or [math.nan], 0.99)

    rows = [
        ("p99, answers from memory (ms)", p99(this.load.from_memory_s()) * 1e3,
         p99(baseline.load.from_memory_s()) * 1e3),
        ("p99, all answers (ms)", p99(this.load.latencies_s) * 1e3,
         p99(baseline.load.latencies_s) * 1e3),
        ("slowest answer that waited for a full read (ms)",
         max(this.load.waited_s() or [math.nan]) * 1e3,
         max(baseline.load.waited_s() or [math.nan]) * 1e3),
        ("bytes sent per client per minute", this.bytes_per_client_minute,
         baseline.bytes_per_client_minute),
        ("bridge CPU, % of a core", this.cpu_s / this.load.wall_s * 100,
         baseline.cpu_s / baseline.load.wall_s * 100),

    ]
    return "\n".join([f"| measure | {this.label} | {baseline.label} | ratio |",
                      "|---|---:|---:|---:|",
                      *(f"| {name} | {a:,.1f} | {b:,.1f} | {a / b:.3f}x |"
                        for name, a, b in rows)])


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
                   help="stop after this many requests (per turn) even before --duration")
    p.add_argument("--query-shards", type=int, default=1,
                   help="the bridge's --query-shards (default 1)")
    p.add_argument("--query-timeout", type=float, default=5.0,
                   help="the bridge's --query-timeout (default 5)")
    p.add_argument("--plain", action="store_true",
                   help="clients ask for identity and never send If-None-Match")
    p.add_argument("--baseline", type=Path, default=None, metavar="DIR",
                   help="also the bridge of this source tree, asked in turns with this one")
    p.add_argument("--turns", type=int, default=1,
                   help="turns of --duration each bridge gets, alternating (default 1)")
    a = p.parse_args(argv)
    if a.clients < 1 or a.duration <= 0 or a.pools < 1 or a.cache_ttl <= 0 or (
            a.evaluation_interval <= 0 or a.turns < 1 or a.query_shards < 1
            or a.query_timeout <= 0 or (a.interval is not None and a.interval <= 0)):
        p.error("--clients, --duration, --pools, --cache-ttl, --evaluation-interval, "
                "--turns, --query-shards, --query-timeout and --interval must be positive")
    shape = Shape(a.clients, a.pools, a.cache_ttl, a.evaluation_interval, a.interval,
                  a.duration, a.max_requests, revalidate=not a.plain,
                  query_shards=a.query_shards, query_timeout_s=a.query_timeout)
    with tempfile.TemporaryDirectory(prefix="bench-bridge-load-") as tmp:
        results = asyncio.run(side_by_side(shape, Path(tmp), a.baseline, a.turns))
    for result in results:
        failed = verdicts(result)
        print(table(result))
        print("\nall targets met\n" if not failed else "\nMISSED: " + "; ".join(failed) + "\n")
    if len(results) == 2:
        print(comparison(*results))
    # This tree's bridge is what the run checks; the baseline is there to compare with.
    return 0 if not verdicts(results[0]) else 1


if __name__ == "__main__":
    unwind_on_sigterm()
    sys.exit(main())
