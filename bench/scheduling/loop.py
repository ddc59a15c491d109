"""One cell of the closed loop: an open-loop stream routed by one policy for a while.

Arrival times and request lengths are drawn before the cell from its seed, so every
policy of a cell meets exactly the same requests (and the same local traffic): the
policies differ only in where they send them. A request's latency counts from its
scheduled arrival, so a late sender cannot hide a slow pool.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from bench.scheduling.decode_times import DecodeTimes
from bench.scheduling.fleet import Fleet, Monitoring
from bench.scheduling.policies import POLICIES, Done, Policy, View
from deploy.demo.load_arrivals import BurstSpec, arrival_times
from poolscope.scheduler_bridge.client import (
    BridgeError,
    SchedulerBridgeClient,
    parse_pool,
)
from poolscope.scheduler_bridge.load_report import receive_report
from poolscope.scheduler_bridge.own_requests import OwnRequests

PROMPT = "Tell me about load balancing."
HEARTBEAT_S = 1.0  # how often a Proxy's heartbeat brings its load report
LONG_SHARE = 0.2  # one request in five is long
# Local traffic: on from the start, then off and on for LOCAL_FLIP_S each, at this share
# of its pool's capacity while on; the Scheduler does not send it and sees it only
# through the summary (or the Proxies' load reports).
LOCAL_FLIP_S = 10.0
LOCAL_ON_SHARE = 0.8
# The bursty shape: every 15 s the rate doubles for 5 s, the base lowered so that the
# mean stays the load asked for.
BURST = BurstSpec(every=15.0, factor=2.0, length=5.0)
BURST_MEAN = 1 + (BURST.factor - 1) * BURST.length / BURST.every


@dataclass(frozen=True)
class Lengths:
    """Output tokens of a short and a long request, and their times under a full batch
    (calibrate)."""

    short_tokens: int
    long_tokens: int
    service_s: tuple[float, float] = (0.0, 0.0)  # latency: short, long
    decode_s: tuple[float, float] = (0.0, 0.0)  # that latency less its first token's wait

    def tokens(self, long: bool) -> int:
        return self.long_tokens if long else self.short_tokens

    @property
    def mean_service_s(self) -> float:
        return (1 - LONG_SHARE) * self.service_s[0] + LONG_SHARE * self.service_s[1]


@dataclass
class Record:
    """One request's outcome; times in seconds from the cell's start."""

    arrival: float
    pool: str
    long: bool
    status: int = 0  # 0: no answer (connection failed)
    error: str = ""
    first_token: float | None = None
    end: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.end is not None


@dataclass(frozen=True)
class Cell:
    policy: str
    load: float
    interval_s: float | None  # None: the policy reads no summary
    arrivals: str  # "poisson" | "bursty"
    seed: int
    duration_s: float
    ttl_s: float | None = None  # the bridge's cache TTL, and how often it is read
    replicas: int = 1  # Scheduler replicas, the arrivals spread over them at random
    # The Schedulers' clock less everyone else's (Prometheus', the bridge's, the Proxies').
    offset_s: float = 0.0
    # (start, length), seconds into the cell: the bridge stopped (SIGSTOP), unreachable.
    outage: tuple[float, float] | None = None
    # The pools whose Proxies send load reports (None: every pool) to a policy reading them.
    reporting: tuple[str, ...] | None = None


def _arrivals(rate: float, shape: str, duration: float, rng: random.Random) -> list[float]:
    if shape == "bursty":
        return list(arrival_times(rate / BURST_MEAN, rng, BURST, duration))
    return list(arrival_times(rate, rng, None, duration))


LOCAL_PATTERN = BurstSpec(every=2 * LOCAL_FLIP_S, factor=0.0, length=LOCAL_FLIP_S)


def local_on_spans(until: float) -> list[tuple[float, float]]:
    """When the local traffic is on, as (start, end) spans up to `until`."""
    spans: list[tuple[float, float]] = []
    t = 0.0
    while t < until:
        if LOCAL_PATTERN.multiplier(t):
            if spans and spans[-1][1] == t:
                spans[-1] = (spans[-1][0], t + LOCAL_FLIP_S)
            else:
                spans.append((t, t + LOCAL_FLIP_S))
        t += LOCAL_FLIP_S
    return spans


def _local_arrivals(rate_on: float, duration: float, rng: random.Random) -> list[float]:
    return list(arrival_times(rate_on, rng, LOCAL_PATTERN, duration))


async def send(session: aiohttp.ClientSession, proxy_url: str, tokens: int,
               record: Record, start: float) -> None:
    """One streamed chat completion; fills the record's status and times."""
    body = {"model": "bench", "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": tokens, "ignore_eos": True, "stream": True}
    try:
        async with session.post(f"{proxy_url}/v1/chat/completions", json=body) as resp:
            record.status = resp.status
            async for line in resp.content:
                if record.first_token is None and _has_content(line):
                    record.first_token = time.monotonic() - start
            record.end = time.monotonic() - start
    except (aiohttp.ClientError, TimeoutError) as e:
        record.status, record.error = 0, f"{e.__class__.__name__}: {e}"


def _has_content(line: bytes) -> bool:
    if not line.startswith(b"data: {"):
        return False
    choices = json.loads(line[6:]).get("choices") or [{}]
    return bool((choices[0].get("delta") or {}).get("content"))


async def read_report(session: aiohttp.ClientSession, proxy_url: str) -> Any:
    """A Proxy's load report body (ProxyExporter.load_report), read now; raises when it
    has none."""
    async with session.get(f"{proxy_url}/v1/pool_load", raise_for_status=True) as resp:
        return await resp.json()


class LiveReader:
    """The oracle's eyes: the requests each pool holds at the moment of the decision, in
    flight and in its Proxy's lines, from every Proxy's load report read then. The Proxy
    hands an Instance no more than its slots, so what it has in flight is what the
    engines run (and wait on, which the sim's and llama.cpp's pages would add nothing
    to); llama.cpp answers /metrics only between two decode steps, which would delay
    each decision by the reads themselves."""

    def __init__(self, fleet: Fleet, session: aiohttp.ClientSession) -> None:
        self._urls = {p.spec.proxy_id: p.proxy_url for p in fleet.pools}
        self._session = session

    async def __call__(self) -> Mapping[str, float | None]:
        docs = await asyncio.gather(*(read_report(self._session, u)
                                      for u in self._urls.values()))
        return {p: OwnRequests.held(parse_pool(d))
                for p, d in zip(self._urls, docs, strict=True)}


async def summary_feed(client: SchedulerBridgeClient, policy: Policy, ttl_s: float) -> None:
    """One replica's reads of the bridge, every `ttl_s`, as a Scheduler would."""
    while True:
        try:
            policy.summary_received(await client.snapshot())
        except BridgeError as e:
            policy.summary_failed(e)
        await asyncio.sleep(ttl_s)


class ReportFeed:
    """The reporting Proxies' load reports, read every `every_s` as their heartbeats would
    bring them, handed to every replica on the Schedulers' clock."""

    def __init__(self, urls: Mapping[str, str], session: aiohttp.ClientSession,
                 every_s: float, replicas: Sequence[Policy], clock: Callable[[], float]
                 ) -> None:
        self._urls = urls
        self._session = session
        self._every = every_s
        self._replicas = replicas
        self._clock = clock
        self.received: set[str] = set()

    async def _read(self, proxy_id: str, url: str) -> None:
        try:
            report = receive_report(await read_report(self._session, url), self._clock())
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return  # a missed heartbeat: the picker's report ages out, never read as idle
        self.received.add(proxy_id)
        for policy in self._replicas:
            policy.report_received(report)

    async def run(self) -> None:
        while True:
            await asyncio.gather(*(self._read(p, u) for p, u in self._urls.items()))
            await asyncio.sleep(self._every)


async def bridge_outage(pid: int, start: float, outage: tuple[float, float]) -> None:
    """The bridge unreachable for a while: stopped, so connections to it hang and time
    out as they do behind a dead network path; then continued."""
    begin, length = outage
    await asyncio.sleep(max(0.0, start + begin - time.monotonic()))
    os.kill(pid, signal.SIGSTOP)
    try:
        await asyncio.sleep(length)
    finally:
        os.kill(pid, signal.SIGCONT)


async def run_cell(fleet: Fleet, monitoring: Monitoring | None, cell: Cell,
                   lengths: Lengths, local_pool: str) -> tuple[list[Record], list[Record]]:
    """The Scheduler's records and the local traffic's, once every answer has ended."""
    rng = random.Random(cell.seed)
    capacities = {p.spec.proxy_id: p.spec.capacity for p in fleet.pools}
    full_rate = sum(capacities.values()) / lengths.mean_service_s
    local_on = LOCAL_ON_SHARE * capacities[local_pool] / lengths.mean_service_s
    on_s = sum(min(end, cell.duration_s) - begin for begin, end in
               local_on_spans(cell.duration_s))
    sched_rate = cell.load * full_rate - local_on * on_s / cell.duration_s
    if sched_rate <= 0:
        raise ValueError(f"a load of {cell.load:g} is below the local traffic alone")
    sched_times = _arrivals(sched_rate, cell.arrivals, cell.duration_s, rng)
    sched_long = [rng.random() < LONG_SHARE for _ in sched_times]
    local_times = _local_arrivals(local_on, cell.duration_s, rng)
    local_long = [rng.random() < LONG_SHARE for _ in local_times]
    spread = random.Random(cell.seed + 2)
    sched_replica = [spread.randrange(cell.replicas) for _ in sched_times]
    decisions = random.Random(cell.seed + 1)

    def clock() -> float:
        return time.time() + cell.offset_s

    policy_cls = POLICIES[cell.policy]
    replicas = [policy_cls(capacities, cell.replicas, random.Random(cell.seed + 1 + 1000 * r),
                           clock) for r in range(cell.replicas)]
    urls = {p.spec.proxy_id: p.proxy_url for p in fleet.pools}
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=300)) as session:
        feeds: list[asyncio.Task[None]] = []
        if policy_cls.reads_summary:
            if monitoring is None or cell.ttl_s is None:
                raise ValueError(f"{cell.policy} reads the summary: it needs the bridge and "
                                 "its cache TTL")
            feeds += [asyncio.create_task(summary_feed(
                SchedulerBridgeClient(monitoring.bridge_url, session), policy, cell.ttl_s))
                for policy in replicas]
        reporting = {p: urls[p] for p in (cell.reporting or urls)}
        reports = ReportFeed(reporting, session, HEARTBEAT_S, replicas, clock)
        if policy_cls.reads_reports:
            feeds.append(asyncio.create_task(reports.run()))
        live = LiveReader(fleet, session)
        token_times = DecodeTimes({p.spec.proxy_id: [f"{e.url}/metrics" for e in p.engines]
                                   for p in fleet.pools}, session)
        if policy_cls.reads_engines:
            feeds.append(asyncio.create_task(token_times.run()))
        # The first decision is made on what a running Scheduler would hold, never on
        # nothing: the feeds' first reads come before the first arrival.
        await _until(lambda: (not policy_cls.reads_summary
                              or all(r.snapshot is not None for r in replicas))
                     and (not policy_cls.reads_reports or reports.received == set(reporting)),
                     FEED_WARMUP_S, feeds)
        start = time.monotonic()
        if cell.outage is not None:
            if monitoring is None:
                raise ValueError("a bridge outage needs the bridge")
            feeds.append(asyncio.create_task(
                bridge_outage(monitoring.bridge_pid, start, cell.outage)))
        records: list[Record] = []
        local: list[Record] = []
        senders: list[asyncio.Task[None]] = []

        async def routed(record: Record, done: Done) -> None:
            try:
                await send(session, urls[record.pool], lengths.tokens(record.long), record,
                           start)
            finally:
                done(record.status in REFUSED)

        async def local_stream() -> None:
            for t, long in zip(local_times, local_long, strict=True):
                await asyncio.sleep(max(0.0, start + t - time.monotonic()))
                record = Record(t, local_pool, long)
                local.append(record)
                senders.append(asyncio.create_task(
                    send(session, urls[local_pool], lengths.tokens(long), record, start)))

        local_task = asyncio.create_task(local_stream())
        try:
            for t, long, r in zip(sched_times, sched_long, sched_replica, strict=True):
                await asyncio.sleep(max(0.0, start + t - time.monotonic()))
                pool, done = await replicas[r].place(View(capacities, decisions, live,
                                                             token_times))
                record = Record(t, pool, long)
                records.append(record)
                senders.append(asyncio.create_task(routed(record, done)))
            await local_task
            await asyncio.gather(*senders)
        finally:
            for task in (*feeds, local_task, *senders):
                task.cancel()
            await asyncio.gather(*feeds, local_task, *senders, return_exceptions=True)
        _raise_failed(feeds)
    return records, local


# A Proxy's answers that mean "not now": the picker avoids the pool for a while.
REFUSED = frozenset({429, 503})
FEED_WARMUP_S = 30.0


async def _until(ready: Callable[[], bool], timeout_s: float,
                 feeds: Sequence[asyncio.Task[None]]) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        _raise_failed(feeds)
        if time.monotonic() > deadline:
            raise RuntimeError(f"the policy's feeds had nothing after {timeout_s:g} s")
        await asyncio.sleep(0.05)


def _raise_failed(feeds: Sequence[asyncio.Task[None]]) -> None:
    """A feed that died would leave the policy on a frozen view: the cell fails instead."""
    for task in feeds:
        if task.done() and not task.cancelled() and task.exception() is not None:
            raise RuntimeError("a feed failed") from task.exception()


async def calibrate(fleet: Fleet, short_tokens: int, long_tokens: int) -> Lengths:
    """Each length on the largest pool with every slot of it busy with one: the service
    and decode times a pool gives under a full batch (a simulated engine's are those it
    has alone; a real one slows as its batch grows, and this is what its capacity
    means). The offered load is a share of the capacity these times give."""
    pool = max(fleet.pools, key=lambda p: p.spec.capacity)
    service, decode = [], []
    async with aiohttp.ClientSession() as session:
        for tokens in (short_tokens, long_tokens):
            start = time.monotonic()
            records = [Record(0.0, pool.spec.proxy_id, False)
                       for _ in range(pool.spec.capacity)]
            await asyncio.gather(*(send(session, pool.proxy_url, tokens, r, start)
                                   for r in records))
            runs = sorted((r.end, r.end - r.first_token) for r in records
                          if r.ok and r.end is not None and r.first_token is not None)
            if len(runs) < len(records):
                raise RuntimeError("calibration request failed: HTTP "
                                   f"{sorted({r.status for r in records})}")
            service.append(runs[len(runs) // 2][0])
            decode.append(runs[len(runs) // 2][1])
    return Lengths(short_tokens, long_tokens, (service[0], service[1]), (decode[0], decode[1]))


async def wait_for_idle_summary(client: SchedulerBridgeClient, pools: Sequence[str],
                                timeout_s: float) -> bool:
    """Until the bridge shows every pool with a measured 0 in flight (the previous cell's
    tail is out of the summary), or `timeout_s`; whether it did."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            snap = await client.snapshot()
        except BridgeError:
            snap = None
        if snap is not None and all(
                p in snap.pools and snap.pools[p].load.inflight_total == 0
                and snap.pools[p].load.load_ratio is not None for p in pools):
            return True
        await asyncio.sleep(0.5)
    return False
