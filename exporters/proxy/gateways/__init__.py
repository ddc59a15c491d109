"""Gateway adapters: a gateway's own /metrics read as Poolscope's Proxy-side series.

One module per gateway, as there is one mapping per engine: each has its page's
metric-name `PREFIXES` (a page with none of them is not that gateway's), the
label that names a pool (`POOL_LABEL`), the families it reads (`READ`) and a
`read` that turns a parsed page into `PoolReading`s. Their order is the rules'
precedence between gateways claiming one pool.

`gie` is the endpoint picker (EPP) under whichever project ships it: the Gateway
API Inference Extension up to v1.5, the llm-d router since. One name keeps one
`source` (`gateway:gie`) across the move, so the rules, dashboards and the
sources table need not learn a second name for the same component.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from poolscope.contract import catalog
from poolscope.exporters.common.health import ErrorReason
from poolscope.exporters.common.plausible import Range
from poolscope.exporters.common.sampling import SampleError
from poolscope.exporters.proxy.gateways import gie, llmgw
from poolscope.exporters.proxy.gateways.pool import Adapter, PoolReading, Pools, parse_page


@dataclass(frozen=True)
class Reading:
    """One read of a gateway page: its pools, and how many of its series were left
    out for a pool label that is not a usable proxy_id."""

    pools: list[PoolReading]
    skipped: int = 0
    skipped_pool: str | None = None  # the first such label, cut, for the log


@dataclass(frozen=True)
class Gateway:
    name: str
    prefixes: tuple[str, ...]
    pool_label: str
    families: Mapping[str, Range]  # the ones `read` reads, and their plausible ranges
    read: Adapter

    def interpret(self, text: str, pools: Pools) -> Reading:
        """The pools of one page; raises SampleError. A page whose every pool-labelled
        series names no usable pool has nothing measured: it fails, so the collector
        says so, rather than succeeding with no pool."""
        page = parse_page(text, self.prefixes, self.families)
        readings = self.read(page, pools)
        if page.skipped and not readings:
            raise SampleError(ErrorReason.INVALID_VALUE,
                              f"no usable pool on the page ({page.skipped_pool} is not a "
                              "usable proxy_id)")
        for reading in readings:
            reading.check()
        return Reading(readings, page.skipped, page.skipped_pool)


GATEWAYS: dict[str, Gateway] = {
    g.name: g for g in (
        Gateway("llmgw", llmgw.PREFIXES, llmgw.POOL_LABEL, llmgw.READ, llmgw.read),
        Gateway("gie", gie.PREFIXES, gie.POOL_LABEL, gie.READ, gie.read),
    )}
assert tuple(GATEWAYS) == catalog.GATEWAYS, "catalog.GATEWAYS names every adapter, in order"
