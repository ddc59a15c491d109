"""The Proxy exporter's gateway mode: a gateway's page, read in the background and
published as the Proxy-side series the rules read.

The page is fetched every `interval` by the same sampling loop the Instance
exporter runs (a slow or dead gateway never blocks a scrape), and a scrape
serves the latest good reading. A failed read leaves every state series out
(measured or absent), and `poolscope_proxy_collector_success{collector="gateway"}`
is 0 with its reason counted, for every pool the adapter has seen, so the pools
keep what the Instance exporters measure and the bridges can say why the
Proxy-side fields are null.

An adapter that knows no pool (with --pool-label, before a read that named one,
or after a good read that named none) still publishes its health, under
`proxy_id=""` (`NO_POOL`): a gateway it has never read must show as a failing
collector on /metrics, not as an empty page. Prometheus stores an empty label as
no label, so those series name no pool, and no pool's rollups or summary count
them; a placeholder name would have made a pool of its own.

With --pool-label, a series whose pool label is not a usable proxy_id is left
out, and the rest of the page read: one endpoint's bad label must not blank every
pool. `poolscope_proxy_gateway_series_skipped_total{reason="invalid_pool"}`
counts them (beside the health series, so it is there from the first read), and
the log names the first such label when a read starts skipping.

The page is parsed on a thread, not on the event loop: a page of tens of
thousands of endpoints takes a second or more to read, and /healthz and /metrics
must answer meanwhile (docs/reliability.md has the figures).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Iterator
from typing import Any

import aiohttp
from prometheus_client.core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from poolscope.contract import catalog as c
from poolscope.exporters.common.fetch import FETCH_REASONS, fetch_text
from poolscope.exporters.common.health import ErrorReason, HealthBoard, HealthFamilies
from poolscope.exporters.common.sampling import SamplingLoop, Slot
from poolscope.exporters.proxy.gateways import Gateway, Reading
from poolscope.exporters.proxy.gateways.pool import PoolReading, Pools
from poolscope.exporters.proxy.report import queue_depth_path, shape
from poolscope.service.identity import Identity

log = logging.getLogger(__name__)

COLLECTOR_NAME = "gateway"
# The reason of every series left out of a reading (exporters/proxy/gateways/pool.py).
SKIPPED_INVALID_POOL = "invalid_pool"
PROXY_HEALTH = HealthFamilies(
    success=c.PROXY_COLLECTOR_SUCCESS, duration=c.PROXY_COLLECTOR_DURATION,
    sample_age=c.PROXY_COLLECTOR_SAMPLE_AGE, errors=c.PROXY_COLLECTOR_ERRORS)
_GRACE_S = 0.5
# The proxy_id of the health series while no pool is known: none, as Prometheus stores it.
NO_POOL = ""
# The sampling loop hands readers an Instance identity; a gateway reading covers
# many pools and Instances, and each of its series carries its own.
_EVERY_POOL = Identity("", "")


class GatewayReader:
    """Fetches the gateway's page and reads it with its adapter."""

    name = COLLECTOR_NAME
    reasons = (*FETCH_REASONS, ErrorReason.INVALID_VALUE)

    def __init__(self, gateway: Gateway, url: str, pools: Pools, timeout: float,
                 bearer_token: str | None = None) -> None:
        self.gateway = gateway
        self.url = url
        self.pools = pools
        self.timeout = timeout
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        # The EPP (GIE v1.5, and the llm-d router) asks for a token on /metrics by default.
        self._headers = {"Authorization": f"Bearer {bearer_token}"} if bearer_token else {}
        self._session: aiohttp.ClientSession | None = None

    async def read(self) -> Reading:
        if self._session is None:
            # Created lazily: a ClientSession must be made inside the running loop.
            self._session = aiohttp.ClientSession(timeout=self._timeout, headers=self._headers)
        text = await fetch_text(self._session, self.url)
        return await asyncio.to_thread(self.gateway.interpret, text, self.pools)

    def families(self, sample: Reading, ids: Identity) -> Iterator[Metric]:
        """The readings' series; `ids` is unused: each series carries its own pool."""
        return reading_families(sample.pools, c.gateway_source(self.gateway.name))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def reading_families(readings: Iterable[PoolReading], source: str) -> Iterator[Metric]:
    """Per pool: its counts, inflight, queues and request counter; per member: that
    it is registered, and its liveness and inflight where the gateway says."""
    f = {fam: fam.new() for fam in (
        c.POOL_INSTANCES_REGISTERED, c.POOL_INSTANCES_ALIVE, c.POOL_INSTANCES_STALE,
        c.POOL_INFLIGHT, c.PROXY_QUEUE_DEPTH, c.PROXY_REQUESTS,
        c.PROXY_INSTANCE_REGISTERED, c.PROXY_INSTANCE_ALIVE, c.PROXY_INSTANCE_INFLIGHT)}
    for r in readings:
        pool = (r.proxy_id, source)
        for family, value in ((c.POOL_INSTANCES_REGISTERED, r.registered),
                              (c.POOL_INSTANCES_ALIVE, r.alive),
                              (c.POOL_INSTANCES_STALE, r.stale),
                              (c.POOL_INFLIGHT, r.inflight)):
            if value is not None:
                f[family].add_metric(pool, value)
        for queue, depth in sorted(r.queue_depth.items()):
            f[c.PROXY_QUEUE_DEPTH].add_metric((*pool, queue), depth)
        if r.requests_total is not None:
            f[c.PROXY_REQUESTS].add_metric((*pool, c.OUTCOME_ANY), r.requests_total)
        for e in sorted(r.endpoints.values(), key=lambda e: e.instance_id):
            member = (r.proxy_id, e.instance_id, source)
            f[c.PROXY_INSTANCE_REGISTERED].add_metric(member, 1.0)
            if e.alive is not None:
                f[c.PROXY_INSTANCE_ALIVE].add_metric(member, 1.0 if e.alive else 0.0)
            if e.inflight is not None:
                f[c.PROXY_INSTANCE_INFLIGHT].add_metric(member, e.inflight)
    return (m for m in f.values() if m.samples)


def _merged(families: Iterable[Metric]) -> Iterator[Metric]:
    """Families of one name made one, so a page has each name once."""
    by_name: dict[str, Metric] = {}
    for m in families:
        if m.name in by_name:
            by_name[m.name].samples.extend(m.samples)
        else:
            by_name[m.name] = m
    return iter(by_name.values())


class GatewayExporter(Collector):
    """The gateway's readings and the reader's health, for one CollectorRegistry."""

    def __init__(self, reader: GatewayReader, interval: float) -> None:
        self.reader = reader
        self.board = HealthBoard(PROXY_HEALTH)
        self.loop = SamplingLoop(interval, self.board)
        # The loop gives a read its HTTP timeout and a grace, so the client's own,
        # more specific timeout fires first (as the Instance exporter's engine read).
        self.slot: Slot[Reading] = self.loop.add(reader, timeout=reader.timeout + _GRACE_S)
        # The pools of the last good reading: their health series say why they went
        # quiet when a read fails; a pool the gateway dropped leaves with it.
        self.fixed = {reader.pools.proxy_id} if reader.pools.proxy_id is not None else set()
        self.pools_seen: set[str] = set(self.fixed)
        # Series left out for an unusable pool label, over every read; None with
        # --proxy-id, where no label is read and nothing can be left out.
        self.skipped: int | None = None if reader.pools.fixed else 0
        self._skipping = False
        self.slot.observers.append(self._remember)

    def _remember(self, reading: Reading) -> None:
        self.pools_seen = self.fixed | {r.proxy_id for r in reading.pools}
        if self.skipped is not None:
            self.skipped += reading.skipped
        # Said when a read starts skipping, not for every read of the same page.
        if reading.skipped and not self._skipping:
            log.warning("gateway page: %d series left out, their pool label is not a "
                        "usable proxy_id (first: %s); the other pools are read",
                        reading.skipped, reading.skipped_pool)
        self._skipping = reading.skipped > 0

    def load_report(self, proxy_id: str) -> dict[str, Any] | None:
        """One pool's load report from the latest fresh reading (None: no fresh reading
        names the pool): the short path a Scheduler ranks on, as an embedded Proxy's
        (poolscope.exporters.proxy.report), one read interval old at most. Its
        `inflight_sampled_at` is when the page was read, so a receiver ages it right;
        a gateway knows no capacity, so that is null (the summary's stands in)."""
        reading, age = self.slot.current(), self.slot.health.age()
        pool = None if reading is None else next(
            (r for r in reading.pools if r.proxy_id == proxy_id), None)
        if pool is None or pool.inflight is None or age is None:
            return None
        now = time.time()
        return shape(proxy_id, now, {
            "load.inflight_total": pool.inflight, "load.inflight_sampled_at": now - age,
            **{queue_depth_path(q): depth for q, depth in pool.queue_depth.items()}})

    def registry(self) -> CollectorRegistry:
        registry = CollectorRegistry()
        registry.register(self)
        return registry

    def describe(self) -> list[Metric]:
        return []  # families vary with what the gateway reports

    def collect(self) -> Iterator[Metric]:
        yield from self.slot.families(_EVERY_POOL)  # the latest reading, while fresh
        pools = sorted(self.pools_seen) or [NO_POOL]
        yield from _merged(m for proxy_id in pools
                           for m in self.board.families((proxy_id, c.SOURCE_EXPORTER)))
        if self.skipped is not None:
            skipped = c.PROXY_GATEWAY_SERIES_SKIPPED.new()
            for proxy_id in pools:
                skipped.add_metric((proxy_id, c.SOURCE_EXPORTER, SKIPPED_INVALID_POOL),
                                   float(self.skipped))
            yield skipped

    async def start(self) -> None:
        await self.loop.sample_all()
        self.loop.start()

    async def stop(self) -> None:
        await self.loop.stop()
        await self.reader.close()
