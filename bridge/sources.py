"""Provenance of every summary field: the static contract joined with live data.

fields.py says where a field should come from; only the live snapshot can say
whether that rollup exists right now, for how many pools, and which `source`
label it carries. An operator reading a `null` finds its reason here. Like
summary.py this has no server dependency, so the Proxy bridge serves the same.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from poolscope.bridge.summary import FieldReading, PoolSnapshot
from poolscope.contract.fields import (
    DATA_QUALITY_PATH,
    DATA_QUALITY_ROLLUP,
    FIELDS,
    Classification,
)


def describe_sources(snapshot: PoolSnapshot) -> dict[str, Any]:
    """One entry per field, in summary order; `wired` counts pools whose rollup exists."""
    pools = snapshot.readings
    entries = [
        _entry(f.path, f.rollup, (pool.get(f.path) for pool in pools.values()), {
            "classification": str(f.classification),
            "lower_layer": f.lower_layer,
            "null_when": f.null_when,
            "kind": str(f.kind),
            "matchers": f.matchers,
            "scale": f.scale,
        })
        for f in FIELDS
    ]
    entries.append(_entry(
        DATA_QUALITY_PATH, DATA_QUALITY_ROLLUP,
        (pool.get(DATA_QUALITY_PATH) for pool in pools.values()), {
            "classification": str(Classification.DERIVED),
            "lower_layer": "the rules' one-hot verdict, made worse by this summary's nulls",
            "null_when": "never: 'missing' when nothing about the pool is known",
            "kind": "state",
            "matchers": {},
            "scale": 1.0,
        }))
    return {"generated_at": snapshot.generated_at, "pools": len(pools), "fields": entries}


def _entry(path: str, rollup: str, readings: Iterable[FieldReading | None],
           static: dict[str, Any]) -> dict[str, Any]:
    present = [r for r in readings if r is not None and r.present]
    sources = Counter(r.source or "unknown" for r in present)
    return {
        "path": path,
        "rollup": rollup,
        **static,
        "wired": len(present),
        "measured": sum(r.measured is not None for r in present),
        "sources": dict(sorted(sources.items())),
    }
