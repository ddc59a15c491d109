"""One cell of the closed loop: an open-loop stream routed by one policy for a while.

Arrival times and request lengths are drawn before the cell from its seed, so every
policy of a cell meets exactly the same requests (and the same local traffic): the
policies differ only in where they send them. A request's latency counts from its
scheduled arrival, so a late sender cannot hide a slow pool.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import aiohttp

from bench.scheduling.fleet import Fleet, Monitoring
from bench.scheduling.policies import Policy, View
from deploy.demo.load_arrivals import BurstSpec, arrival_times
from poolscope.scheduler_bridge.client import (
    BridgeError,
    BridgeSnapshot,
    PoolSummary,
    SchedulerBridgeClient,
    parse_pool,
)
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
    delay_s: float = 0.0  # how old the summary handed to the policy is held back


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


async def read_report(session: aiohttp.ClientSession, proxy_url: str) -> PoolSummary:
    """A Proxy's load report (ProxyExporter.load_report), read now; raises when it has none."""
    async with session.get(f"{proxy_url}/v1/pool_load", raise_for_status=True) as resp:
        return parse_pool(await resp.json())


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
        reports = await asyncio.gather(*(read_report(self._session, u)
                                         for u in self._urls.values()))
        return {p: OwnRequests.held(r) for p, r in zip(self._urls, reports, strict=True)}


class SnapshotFeed:
    """The bridge read every `ttl_s`, as a Scheduler would; `delay_s` hands policies a
    snapshot that old instead of the newest (how old may a summary be?)."""

    def __init__(self, client: SchedulerBridgeClient, ttl_s: float, delay_s: float) -> None:
        self._client = client
        self._ttl = ttl_s
        self._delay = delay_s
        self._held: deque[tuple[float, BridgeSnapshot]] = deque()

    async def run(self) -> None:
        while True:
            try:
                snapshot = await self._client.snapshot()
                self._held.append((time.time(), snapshot))  # when it arrived
            except (BridgeError, aiohttp.ClientError, TimeoutError, ValueError):
                pass  # the Scheduler keeps its last snapshot, whose age says how old
            horizon = time.time() - self._delay - 60
            while len(self._held) > 1 and self._held[1][0] < horizon:
                self._held.popleft()
            await asyncio.sleep(self._ttl)

    def current(self) -> list[tuple[float, BridgeSnapshot]]:
        """The snapshots a Scheduler could use now, oldest first."""
        due = time.time() - self._delay
        return [h for h in self._held if h[0] <= due]


class ReportFeed:
    """Every Proxy's load report, read every `every_s` as its heartbeats would bring it."""

    def __init__(self, fleet: Fleet, session: aiohttp.ClientSession, every_s: float) -> None:
        self._urls = {p.spec.proxy_id: p.proxy_url for p in fleet.pools}
        self._session = session
        self._every = every_s
        self.reports: dict[str, PoolSummary] = {}

    async def _read(self, proxy_id: str, url: str) -> None:
        try:
            self.reports[proxy_id] = await read_report(self._session, url)
        except (aiohttp.ClientError, TimeoutError, ValueError, KeyError):
            self.reports.pop(proxy_id, None)  # a missed heartbeat: unknown, not idle

    async def run(self) -> None:
        while True:
            await asyncio.gather(*(self._read(p, u) for p, u in self._urls.items()))
            await asyncio.sleep(self._every)


async def run_cell(fleet: Fleet, monitoring: Monitoring | None, policy: Policy, cell: Cell,
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
    decisions = random.Random(cell.seed + 1)

    urls = {p.spec.proxy_id: p.proxy_url for p in fleet.pools}
    own = OwnRequests()
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=300)) as session:
        feed = None
        feeds: list[asyncio.Task[None]] = []
        if monitoring is not None:
            if cell.ttl_s is None:
                raise ValueError(f"a cell read at a {monitoring.interval_s:g} s interval "
                                 "needs the bridge's cache TTL")
            feed = SnapshotFeed(SchedulerBridgeClient(monitoring.bridge_url, session),
                                cell.ttl_s, cell.delay_s)
            feeds.append(asyncio.create_task(feed.run()))
        live = LiveReader(fleet, session)
        reports = ReportFeed(fleet, session, HEARTBEAT_S)
        if policy.reads_reports:
            feeds.append(asyncio.create_task(reports.run()))
        # The first decision is made on what a running Scheduler would hold, never on
        # nothing: the feeds' first reads come before the first arrival.
        await _until(lambda: (feed is None or bool(feed.current()))
                     and (not policy.reads_reports or len(reports.reports) == len(urls)),
                     FEED_WARMUP_S + cell.delay_s, feeds)
        start = time.monotonic()
        records: list[Record] = []
        local: list[Record] = []
        senders: list[asyncio.Task[None]] = []

        async def routed(record: Record) -> None:
            try:
                await send(session, urls[record.pool], lengths.tokens(record.long), record,
                           start)
            finally:
                own.finished(record.pool)

        async def local_stream() -> None:
            for t, long in zip(local_times, local_long, strict=True):
                await asyncio.sleep(max(0.0, start + t - time.monotonic()))
                record = Record(t, local_pool, long)
                local.append(record)
                senders.append(asyncio.create_task(
                    send(session, urls[local_pool], lengths.tokens(long), record, start)))

        local_task = asyncio.create_task(local_stream())
        try:
            for t, long in zip(sched_times, sched_long, strict=True):
                await asyncio.sleep(max(0.0, start + t - time.monotonic()))
                held = feed.current() if feed else []
                snapshot, received = held[-1][1] if held else None, held[-1][0] if held else 0.0
                pool = await policy.choose(View(capacities, snapshot, received, own,
                                                decisions, live, reports.reports))
                record = Record(t, pool, long)
                records.append(record)
                own.sent(pool)
                senders.append(asyncio.create_task(routed(record)))
            await local_task
            await asyncio.gather(*senders)
        finally:
            for task in (*feeds, local_task, *senders):
                task.cancel()
            await asyncio.gather(*feeds, local_task, *senders, return_exceptions=True)
        _raise_failed(feeds)
    return records, local


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
        except (BridgeError, aiohttp.ClientError, TimeoutError):
            snap = None
        if snap is not None and all(
                p in snap.pools and snap.pools[p].load.inflight_total == 0
                and snap.pools[p].load.load_ratio is not None for p in pools):
            return True
        await asyncio.sleep(0.5)
    return False
