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

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from poolscope.exporters.common.health import ErrorReason
from poolscope.exporters.common.sampling import SampleError
from poolscope.service.identity import valid_id

# One sample of the page: its labels and value.
Sample = tuple[Mapping[str, str], float]
# Every sample of the page by metric name (counters under their `_total` name).
Page = dict[str, list[Sample]]

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

    def of(self, labels: Mapping[str, str]) -> str:
        """The pool of a series; raises SampleError when it names none we can use."""
        if self.proxy_id is not None:
            return self.proxy_id
        assert self.label is not None
        pool = labels.get(self.label, "")
        if not valid_id(pool):
            raise SampleError(ErrorReason.INVALID_VALUE,
                              f"pool label {self.label}={pool[:80]!r} is not a usable proxy_id")
        return pool


Adapter = Callable[[Page, Pools], list[PoolReading]]


def parse_page(text: str, prefixes: tuple[str, ...], read: Iterable[str]) -> Page:
    """Every sample of the page; raises SampleError for a page that is not the
    exposition format, a page with no family of any of the gateway's `prefixes`
    (the URL is not that gateway's), or a non-finite or negative value in a family
    the adapter `read`s (one it does not read cannot spoil the others)."""
    page: Page = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                page.setdefault(s.name, []).append((s.labels, s.value))
    except ValueError as e:
        raise SampleError(ErrorReason.PARSE, f"not a Prometheus text page: {e}") from e
    if not any(name.startswith(prefixes) for name in page):
        names = " or ".join(f"{p}*" for p in prefixes)
        raise SampleError(ErrorReason.PARSE, f"no {names} metrics on the page")
    for name in read:
        for labels, value in page.get(name, ()):
            if not math.isfinite(value) or value < 0:
                raise SampleError(ErrorReason.INVALID_VALUE, f"{name}{dict(labels)} = {value!r}")
    return page


def by_pool(samples: Iterable[Sample], pools: Pools) -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {}
    for labels, value in samples:
        out.setdefault(pools.of(labels), []).append((labels, value))
    return out


def flag(name: str, value: float) -> bool:
    """A 0/1 gauge as a bool; anything else fails the sample."""
    if value not in (0.0, 1.0):
        raise SampleError(ErrorReason.INVALID_VALUE, f"{name} = {value!r}, expected 0 or 1")
    return value == 1.0
