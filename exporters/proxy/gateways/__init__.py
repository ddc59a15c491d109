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

from dataclasses import dataclass

from poolscope.exporters.common import catalog
from poolscope.exporters.proxy.gateways import gie, llmgw
from poolscope.exporters.proxy.gateways.pool import Adapter


@dataclass(frozen=True)
class Gateway:
    name: str
    prefixes: tuple[str, ...]
    pool_label: str
    families: tuple[str, ...]  # the ones `read` reads, checked for valid values
    read: Adapter


GATEWAYS: dict[str, Gateway] = {
    g.name: g for g in (
        Gateway("llmgw", llmgw.PREFIXES, llmgw.POOL_LABEL, llmgw.READ, llmgw.read),
        Gateway("gie", gie.PREFIXES, gie.POOL_LABEL, gie.READ, gie.read),
    )}
assert tuple(GATEWAYS) == catalog.GATEWAYS, "catalog.GATEWAYS names every adapter, in order"
