"""The PromQL the bridges send: `proxy_pool:` selectors, and when the rules wrote them.

One selector, `{__name__=~"proxy_pool:.+"}`, reads every field of every pool. It can
be split by rollup name into a few shards evaluated at the same time T: the snapshot
stays consistent (one evaluation time), Prometheus encodes the shards on several
cores, and the bridge parses the first answers while the others are still being
produced. The number of queries depends on the shard count, never on the number of
pools; the last shard's negative matcher catches rollups fields.py does not know yet,
so every pool seen in any proxy_pool: series is still found.

One more query asks when the rules last wrote a rollup: an answer at time T can hold
samples written long before T (Prometheus restarted on old data, the rules stopped, a
cache replaying an answer), and only their own timestamps tell. Asked alone, it is
the cache's probe: whether a full read would find anything the last one did not. Over
every pool it reads the one series the rules write after all the rollups
(`fleet:proxy_pools:count`): at 10,000 pools a probe of every pool's data_quality takes
Prometheus over 100 ms, during which each request due for a probe waits
(docs/benchmarks.md). Where that series is absent (rules from before it, their
data_quality rules failing, an evaluator that writes asynchronously), a second query
asks every pool's data_quality.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterable, Sequence
from itertools import chain

from poolscope.bridge.rollup_index import ROLLUP_PREFIX
from poolscope.bridge.summary import InstantQuery, PoolSnapshot, Sample, Vector, build_snapshot
from poolscope.contract.fields import DATA_QUALITY_ROLLUP, rollup_names

log = logging.getLogger(__name__)

SNAPSHOT_QUERY = '{__name__=~"proxy_pool:.+"}'
# Every pool has a data_quality series, written after its other rollups in the rules'
# one group: its timestamp is that of every rollup of the evaluation.
EVALUATED_QUERY = f'max(timestamp({{__name__="{DATA_QUALITY_ROLLUP}"}}))'
# Written by the same evaluation after every rollup (rules/src/proxy_pool.yml): one sample.
FLEET_SERIES = "fleet:proxy_pools:count"
FLEET_EVALUATED_QUERY = f"max(timestamp({FLEET_SERIES}))"
# The probes of every pool, first to last: a rule set without the fleet series falls back.
EVERY_POOL_EVALUATED = (FLEET_EVALUATED_QUERY, EVALUATED_QUERY)

_NAMES = sorted(n.removeprefix(ROLLUP_PREFIX) for n in rollup_names())
# Names go into a regex unescaped; fields.py only uses characters that need no escaping.
if not all(re.fullmatch(r"[a-z0-9_:]+", n) for n in _NAMES):
    raise ValueError(f"a rollup name needs regex escaping: {_NAMES}")


def snapshot_queries(shards: int = 1) -> tuple[str, ...]:
    """`shards` selectors that together select each proxy_pool: series exactly once."""
    if shards < 1:
        raise ValueError("shards must be >= 1")
    if shards == 1:
        return (SNAPSHOT_QUERY,)
    groups = [_NAMES[i::shards] for i in range(min(shards, len(_NAMES)))]
    named = [name for group in groups[:-1] for name in group]
    return (*(f'{{__name__=~"{ROLLUP_PREFIX}({"|".join(g)})"}}' for g in groups[:-1]),
            f'{{__name__=~"{ROLLUP_PREFIX}.+",__name__!~"{ROLLUP_PREFIX}({"|".join(named)})"}}')


async def read_snapshot(query: InstantQuery, at: float, shards: int = 1,
                        evaluated: Sequence[str] = (EVALUATED_QUERY,)) -> PoolSnapshot:
    """Every shard at the same evaluation time: the snapshot is consistent by construction.

    A shard that fails leaves its fields null (so data_quality is at most partial) and
    is counted in `failed_queries`; when every shard fails the first error is raised.
    When the rollups' age cannot be read, the snapshot's age is unknown (served stale).
    `evaluated`: how to ask for it (rollups_written_at).
    """
    written, *results = await asyncio.gather(
        rollups_written_at(query, at, evaluated),
        *(query(q, at) for q in snapshot_queries(shards)),
        return_exceptions=True)
    answers: list[Sequence[Sample]] = []
    failures: list[Exception] = []
    for result in results:
        if isinstance(result, Exception):
            log.warning("snapshot query failed at %s: %s", at, result)
            failures.append(result)
        elif isinstance(result, BaseException):
            raise result  # cancellation and the like are not a failed query
        else:
            answers.append(result)
    if not answers:
        raise failures[0]
    snapshot = build_snapshot(_joined(answers), at)
    snapshot.failed_queries = len(failures)
    if isinstance(written, Exception):  # the age stays unknown
        log.warning("rollup timestamps unreadable at %s: %s", at, written)
    elif isinstance(written, BaseException):
        raise written
    else:
        snapshot.rollups_at = written
    return snapshot


async def rollups_written_at(query: InstantQuery, at: float,
                             evaluated: Sequence[str] = (EVALUATED_QUERY,)) -> float | None:
    """When the rules last wrote the rollups read at `at`: `at` itself when there are
    none (nothing older is served), None when their timestamps hold no number. Each of
    `evaluated` is asked in turn until one selects a series."""
    for promql in evaluated:
        answer = await query(promql, at)
        if answer:
            break
    stamps = [value for _, value in answer if value is not None]
    return min(max(stamps), at) if stamps else (None if answer else at)


def _joined(answers: Sequence[Sequence[Sample]]) -> Iterable[Sample]:
    """One Vector when every answer is one (build_snapshot's fast path), else a chain."""
    if len(answers) == 1:
        return answers[0]
    vectors = [a for a in answers if isinstance(a, Vector)]
    return Vector.join(vectors) if len(vectors) == len(answers) else chain.from_iterable(answers)
