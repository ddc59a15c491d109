"""The PromQL the bridges send: only `proxy_pool:` selectors, a fixed number of them.

One selector, `{__name__=~"proxy_pool:.+"}`, reads every field of every pool. It can
be split by rollup name into a few shards evaluated at the same time T: the snapshot
stays consistent (one evaluation time), Prometheus encodes the shards on several
cores, and the bridge parses the first answers while the others are still being
produced. The number of queries depends on the shard count, never on the number of
pools; the last shard's negative matcher catches rollups fields.py does not know yet,
so every pool seen in any proxy_pool: series is still found.
"""

from __future__ import annotations

import re

from scheduler_bridge.fields import rollup_names

ROLLUP_PREFIX = "proxy_pool:"
SNAPSHOT_QUERY = '{__name__=~"proxy_pool:.+"}'

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
