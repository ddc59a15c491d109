"""llmgw's Go router, read from its admin listener's /metrics.

Its endpoint collector publishes, per endpoint (labels `replica`, `pool`; an
endpoint without a pool is `pool="none"`): inflight (dispatched, not finished),
the engine's waiting and running requests and KV usage as last scraped, the
drain rate, `metrics_stale` and `breaker_open`; per admission band the queue
depth; per model the pool saturation. docs/gateways.md has the page.

Mapped:
- members: every endpoint of the pool (with --pool-label, endpoints in no pool
  belong to none); alive when its metrics are fresh and its
  circuit breaker is closed (an endpoint the router will not send to is not
  free capacity), stale otherwise;
- inflight: the endpoints' inflight, summed;
- the prepare queue: the admission bands' depths, summed, only when every series
  is one pool's (--proxy-id): the bands are the router's, not a pool's.
Not mapped: the router keeps no request counter in this collector (QPS comes from
the engines then), and saturation is per model, not per pool.
"""

from __future__ import annotations

from poolscope.exporters.common.plausible import FLAG, POOL_REQUESTS, QUEUED
from poolscope.exporters.proxy.gateways.pool import (
    Endpoint,
    Page,
    PoolReading,
    Pools,
    Sample,
)

PREFIXES = ("llmgw_",)
POOL_LABEL = "pool"
NO_POOL = "none"  # what the router calls the pool of an endpoint that has none
_INFLIGHT = "llmgw_endpoint_inflight"
_STALE = "llmgw_endpoint_metrics_stale"
_BREAKER = "llmgw_endpoint_breaker_open"
_ADMISSION = "llmgw_admission_queue_depth"
_FLAGS = (_STALE, _BREAKER)
# Each family read and its plausible range: inflight to one endpoint, 0/1 flags (a
# flag of 2 is a corrupt page, never read as set or clear), a band's depth.
READ = {_INFLIGHT: QUEUED, **dict.fromkeys(_FLAGS, FLAG), _ADMISSION: POOL_REQUESTS}


def _pooled(page: Page, name: str, pools: Pools) -> list[Sample]:
    """The family's samples; with --pool-label, not those of endpoints in no pool."""
    samples = page.get(name)
    if pools.label is None:
        return samples
    return [(labels, v) for labels, v in samples if labels.get(pools.label) != NO_POOL]


def read(page: Page, pools: Pools) -> list[PoolReading]:
    readings: dict[str, PoolReading] = {}
    flags: dict[tuple[str, str], list[bool]] = {}
    for name in _FLAGS:
        for pool, samples in page.by_pool(_pooled(page, name, pools), pools).items():
            for labels, value in samples:
                flags.setdefault((pool, labels.get("replica", "")), []).append(value == 1)
    for pool, samples in page.by_pool(_pooled(page, _INFLIGHT, pools), pools).items():
        reading = readings.setdefault(pool, PoolReading(pool))
        reading.inflight = sum(value for _, value in samples)
        for labels, value in samples:
            replica = labels.get("replica", "")
            down = flags.get((pool, replica), [])
            # Alive needs both flags read: a missing one is unknown, not "closed".
            alive = None if len(down) < len(_FLAGS) else not any(down)
            reading.endpoints[replica] = Endpoint(replica, alive, value)
    if pools.fixed:
        assert pools.proxy_id is not None
        reading = readings.setdefault(pools.proxy_id, PoolReading(pools.proxy_id))
        bands = page.get(_ADMISSION)
        if bands:
            reading.queue_depth["prepare"] = sum(v for _, v in bands)
    for reading in readings.values():
        members = reading.endpoints.values()
        reading.registered = float(len(members))
        if all(e.alive is not None for e in members):
            reading.alive = float(sum(1 for e in members if e.alive))
            reading.stale = reading.registered - reading.alive
    return sorted(readings.values(), key=lambda r: r.proxy_id)
