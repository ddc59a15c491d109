"""What a gateway adapter makes of one gateway page: a reading per pool.

A gateway is a Proxy that is not ours (llmgw's Go router, the endpoint picker
that the Gateway API Inference Extension started and the llm-d router carries on).
Its adapter turns the gateway's own
series into these readings, and `GatewayCollector` publishes them as Poolscope's
Proxy-side series (exporters/proxy/gateway.py, GatewayExporter), so the rules
cannot tell an adapter from the embedded Proxy library except by `source`. A
field the gateway does not measure is None and its series absent, never 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from poolscope.exporters.common.health import ErrorReason
from poolscope.exporters.common.plausible import AMOUNT, MEMBERS, POOL_REQUESTS, Range
from poolscope.exporters.common.promtext import PromTextError, prefixes_on_page, select
from poolscope.exporters.common.sampling import SampleError
from poolscope.service.identity import valid_id

# One sample of the page: its labels and value.
Sample = tuple[Mapping[str, str], float]
# How much of an unusable pool label a log line quotes.
_QUOTED = 80


@dataclass(frozen=True)
class Endpoint:
    """One member as the gateway names it; None where the gateway does not say."""

    instance_id: str
    alive: bool | None = None
    inflight: float | None = None


@dataclass
class PoolReading:
    """One pool of the gateway page."""

    proxy_id: str
    endpoints: dict[str, Endpoint] = field(default_factory=dict)
    registered: float | None = None
    alive: float | None = None
    stale: float | None = None
    inflight: float | None = None
    queue_depth: dict[str, float] = field(default_factory=dict)  # queue -> depth
    requests_total: float | None = None

    def check(self) -> None:
        """Raise SampleError(invalid_value) for a figure outside its plausible range: a
        pool's figures are sums, and every endpoint may be plausible while their sum is
        not."""
        for what, value, valid in (
                ("instances registered", self.registered, MEMBERS),
                ("instances alive", self.alive, MEMBERS),
                ("instances stale", self.stale, MEMBERS),
                ("inflight requests", self.inflight, POOL_REQUESTS),
                ("requests", self.requests_total, AMOUNT),
                *((f"{queue} queue depth", depth, POOL_REQUESTS)
                  for queue, depth in self.queue_depth.items())):
            if value is not None:
                valid.check(f"pool {self.proxy_id}: {what}", value)


@dataclass(frozen=True)
class Pools:
    """Which pool a gateway series belongs to: every series to one `proxy_id`
    (--proxy-id), or the value of the gateway's pool label (--pool-label)."""

    proxy_id: str | None = None
    label: str | None = None

    def __post_init__(self) -> None:
        if (self.proxy_id is None) == (self.label is None):
            raise ValueError("give exactly one of proxy_id and label")

    @property
    def fixed(self) -> bool:
        return self.proxy_id is not None


@dataclass
class Page:
    """The samples of the families an adapter reads, by metric name (counters under
    their `_total` name), and the series left out for naming no usable pool."""

    series: dict[str, list[Sample]]
    skipped: int = 0
    # The first unusable pool label value, cut, for the log.
    skipped_pool: str | None = None

    def __contains__(self, name: str) -> bool:
        return name in self.series

    def __getitem__(self, name: str) -> list[Sample]:
        return self.series[name]

    def get(self, name: str) -> list[Sample]:
        return self.series.get(name, [])

    def by_pool(self, samples: Iterable[Sample], pools: Pools) -> dict[str, list[Sample]]:
        """The samples by pool. With --pool-label, a sample whose label is not a usable
        proxy_id is left out and counted: one endpoint's bad label must not blank every
        other pool on the page."""
        if pools.proxy_id is not None:
            return {pools.proxy_id: list(samples)}
        assert pools.label is not None
        out: dict[str, list[Sample]] = {}
        for labels, value in samples:
            pool = labels.get(pools.label, "")
            if valid_id(pool):
                out.setdefault(pool, []).append((labels, value))
                continue
            self.skipped += 1
            if self.skipped_pool is None:
                self.skipped_pool = f"{pools.label}={pool[:_QUOTED]!r}"
        return out


Adapter = Callable[[Page, Pools], list[PoolReading]]


def parse_page(text: str, prefixes: tuple[str, ...], read: Mapping[str, Range]) -> Page:
    """The samples of the families the adapter `read`s; raises SampleError for a page
    with no family of any of the gateway's `prefixes` (the URL is not that gateway's),
    a sample line of a family read that breaks the exposition format or that repeats
    a series (counted once, or twice, it is not a measurement), or a value outside the
    plausible range `read` gives its family. The page is read as an engine's page is
    (exporters/common/promtext.py): only the lines of the families read are parsed,
    so a family the adapter does not read cannot spoil the others, and a large page
    is read in about half the time a parse of every line takes."""
    if not prefixes_on_page(text, prefixes):
        names = " or ".join(f"{p}*" for p in prefixes)
        raise SampleError(ErrorReason.PARSE, f"no {names} metrics on the page")
    try:
        found = select(text, read)
    except PromTextError as e:
        raise SampleError(ErrorReason.PARSE, str(e)) from e
    page = Page({name: [(dict(labels), value) for labels, value in samples]
                 for name, samples in found.items()})
    for name, samples in page.series.items():
        valid = read[name]
        for labels, value in samples:
            if not valid.holds(value):  # the name and labels are only quoted for a failure
                valid.check(f"{name}{labels}", value)
    return page
