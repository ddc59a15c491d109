"""The few queries behind the Proxy-local view, all evaluated at one time.

Four queries, whatever the pool's size: one selector for every raw series the view
reads (each host's network rates among them, as its exporter states them), the
per-Instance figures the rules no longer record (a host sample's age with the
scrape's, whether the host answered lately: computed here for one pool, under names
of their own),
the queues' mean wait (a ratio of rates, which no selector can express), and the
collector error reasons that grew recently (which say why a collector is failing
*now*, not what it once failed on). Every one is confined to this pool with the
validated, escaped `proxy_id` matcher.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass

from poolscope.bridge.promql import pool_matcher
from poolscope.bridge.summary import InstantQuery, Sample
from poolscope.contract import catalog as c
from poolscope.contract.thresholds import MEMBER_MEMORY

UP = "up"
# Per-Instance figures computed by the per_instance query, named as recording rules
# would name them (level:metric:operations), with the same arithmetic as the pool
# rollups in rules/proxy_pool.yml.
FRESHNESS_RULE = "instance:resource_freshness_seconds:max"
# Present for an Instance whose host collector answered within the member memory: a
# pool without a Proxy exporter counts such a member stale, so it is listed as one.
SEEN_RULE = f"instance:host_collector_success:last_over_time{MEMBER_MEMORY}"

RAW_FAMILIES: tuple[c.Family, ...] = (
    c.PROXY_INSTANCE_REGISTERED, c.PROXY_INSTANCE_ALIVE, c.PROXY_INSTANCE_HEARTBEAT_AGE,
    c.PROXY_INSTANCE_CAPACITY, c.PROXY_INSTANCE_INFLIGHT, c.PROXY_INSTANCE_IDLE,
    c.PROXY_INSTANCE_LAST_DISPATCH, c.PROXY_COLLECTOR_SUCCESS, c.PROXY_COLLECTOR_ERRORS,
    c.PROXY_QUEUE_DEPTH, c.PROXY_QUEUE_CAPACITY, c.PROXY_QUEUE_OLDEST_AGE,
    c.POOL_INSTANCES_REGISTERED, c.POOL_INSTANCES_ALIVE, c.POOL_INSTANCES_STALE,
    c.HOST_CPU_UTILIZATION, c.HOST_MEMORY_USED, c.HOST_MEMORY_TOTAL,
    c.HOST_NETWORK_RECEIVE_RATE, c.HOST_NETWORK_TRANSMIT_RATE,
    c.GPU_DEVICES, c.GPU_HEALTHY, c.GPU_UTILIZATION, c.GPU_MEMORY_USED, c.GPU_MEMORY_TOTAL,
    c.ENGINE_REQUESTS_RUNNING, c.ENGINE_REQUESTS_WAITING, c.ENGINE_KV_CACHE_USAGE,
    c.INSTANCE_CAPACITY, c.INSTANCE_ADMISSION_STATE,
    c.COLLECTOR_SUCCESS, c.COLLECTOR_ERRORS, c.COLLECTOR_UNAVAILABLE, c.COLLECTOR_SAMPLE_AGE,
)
RAW_NAMES: tuple[str, ...] = (*(f.name for f in RAW_FAMILIES), UP)

WAIT = c.PROXY_QUEUE_WAIT.name
# An error reason that grew within this window is a current cause.
RECENT_ERRORS_WINDOW = "1m"


def names_selector(names: Sequence[str], *matchers: str) -> str:
    """One selector for every series named in `names` (and `matchers`): one query reads
    them all at one instant, rather than one query per name."""
    # Names go into a regex unescaped (as in bridge/queries.py).
    if not all(re.fullmatch(r"[a-z0-9_:]+", n) for n in names):
        raise ValueError(f"a series name needs regex escaping: {names}")
    return "{" + ",".join((f'__name__=~"{"|".join(names)}"', *matchers)) + "}"


def _named(name: str, expr: str) -> str:
    """`expr` under `name`, and labelled figure=`name` too: `or` matches label sets
    without `__name__`, so figures of one Instance would otherwise drop each other."""
    return (f'label_replace(label_replace({expr}, "__name__", "{name}", "", ""),'
            f' "figure", "{name}", "", "")')


def _per_instance(pool: str) -> str:
    age = f'{c.COLLECTOR_SAMPLE_AGE.name}{{collector="host",{pool}}}'
    success = f'{c.COLLECTOR_SUCCESS.name}{{collector="host",{pool}}}'
    by = "max by (proxy_id, instance_id)"
    return " or ".join((
        _named(FRESHNESS_RULE, f"{by} (({age} >= 0) + (time() - timestamp({age})))"),
        _named(SEEN_RULE, f"{by} (last_over_time({success}[{MEMBER_MEMORY}]))"),
    ))


@dataclass(frozen=True)
class LocalQueries:
    raw: str
    per_instance: str
    queue_wait: str
    recent_errors: str

    @classmethod
    def for_pool(cls, proxy_id: str) -> LocalQueries:
        pool = pool_matcher(proxy_id)
        return cls(
            raw=names_selector(RAW_NAMES, pool),
            per_instance=_per_instance(pool),
            # 0 / 0 is NaN, which parses as null: no traffic, no mean wait.
            queue_wait=(f"rate({WAIT}_sum{{{pool}}}[1m]) / rate({WAIT}_count{{{pool}}}[1m])"),
            recent_errors=(f"increase({c.COLLECTOR_ERRORS.name}{{{pool}}}"
                           f"[{RECENT_ERRORS_WINDOW}]) > 0"),
        )

    def all(self) -> tuple[str, ...]:
        return (self.raw, self.per_instance, self.queue_wait, self.recent_errors)


@dataclass(frozen=True)
class LocalSamples:
    """What the local queries returned, all evaluated at `evaluated_at`."""

    evaluated_at: float
    raw: Sequence[Sample]
    queue_wait: Sequence[Sample]
    recent_errors: Sequence[Sample]


async def read_local(query: InstantQuery, queries: LocalQueries, at: float) -> LocalSamples:
    """Every local query at `at`, or the first failure: a view missing one query's
    series would read as nulls that were never measured as such."""
    raw, per_instance, wait, errors = await asyncio.gather(
        *(query(q, at) for q in queries.all()))
    return LocalSamples(at, [*raw, *per_instance], wait, errors)
