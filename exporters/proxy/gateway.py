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
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import aiohttp
from prometheus_client.core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from poolscope.exporters.common import catalog as c
from poolscope.exporters.common.fetch import FETCH_REASONS, fetch_text
from poolscope.exporters.common.health import ErrorReason, HealthBoard, HealthFamilies
from poolscope.exporters.common.sampling import SamplingLoop, Slot
from poolscope.exporters.proxy.gateways import Gateway
from poolscope.exporters.proxy.gateways.pool import PoolReading, Pools, parse_page
from poolscope.service.identity import Identity

COLLECTOR_NAME = "gateway"
PROXY_HEALTH = HealthFamilies(
    success=c.PROXY_COLLECTOR_SUCCESS, duration=c.PROXY_COLLECTOR_DURATION,
    sample_age=c.PROXY_COLLECTOR_SAMPLE_AGE, errors=c.PROXY_COLLECTOR_ERRORS)
Readings = list[PoolReading]
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

    async def read(self) -> Readings:
        if self._session is None:
            # Created lazily: a ClientSession must be made inside the running loop.
            self._session = aiohttp.ClientSession(timeout=self._timeout, headers=self._headers)
        text = await fetch_text(self._session, self.url)
        page = parse_page(text, self.gateway.prefixes, self.gateway.families)
        return self.gateway.read(page, self.pools)

    def families(self, sample: Readings, ids: Identity) -> Iterator[Metric]:
        """The readings' series; `ids` is unused: each series carries its own pool."""
        return reading_families(sample, c.gateway_source(self.gateway.name))

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
        self.slot: Slot[Readings] = self.loop.add(reader, timeout=reader.timeout + _GRACE_S)
        # The pools of the last good reading: their health series say why they went
        # quiet when a read fails; a pool the gateway dropped leaves with it.
        self.fixed = {reader.pools.proxy_id} if reader.pools.proxy_id is not None else set()
        self.pools_seen: set[str] = set(self.fixed)
        self.slot.observers.append(self._remember)

    def _remember(self, readings: Readings) -> None:
        self.pools_seen = self.fixed | {r.proxy_id for r in readings}

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

    async def start(self) -> None:
        await self.loop.sample_all()
        self.loop.start()

    async def stop(self) -> None:
        await self.loop.stop()
        await self.reader.close()
