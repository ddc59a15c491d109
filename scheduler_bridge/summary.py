"""Pool summaries (schema_version 1) from `proxy_pool:*` samples of one evaluation.

Free of aiohttp and of any server so that the Proxy bridge can import it and serve,
byte for byte, the summary the Scheduler bridge serves for the same pool: both build it
here and encode it with `encode_json`.

The contract (DESIGN.md): a field is `null` unless its rollup holds a measured value at
the evaluation time; NaN and infinities are not measurements. Samples that cannot be
turned into a value honestly (two series for one field, a fractional count, an unknown
state) leave the field null and are counted in `PoolSnapshot.rejected` by reason, so a
bad rule shows up on /metrics instead of as a plausible number.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import math
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

from scheduler_bridge.fields import (
    DATA_QUALITY_LABEL,
    DATA_QUALITY_PATH,
    DATA_QUALITY_ROLLUP,
    FIELDS,
    METRIC_SOURCE_FIELDS,
    QUALITY_GROUPS,
    SECTIONS,
    Field,
    Kind,
)
from scheduler_bridge.queries import ROLLUP_PREFIX, snapshot_queries

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
UNKNOWN_SOURCE = "unknown"
QUALITIES = ("complete", "partial", "missing")  # best to worst

Value = float | int | str | None


# One series of an instant vector: its labels and its value, None for NaN / infinities.
# A plain tuple: 34,000 of them are made per refresh at 1,000 pools.
Sample = tuple[Mapping[str, str], float | None]


InstantQuery = Callable[[str, float], Awaitable[Sequence[Sample]]]


def parse_value(text: str) -> float | None:
    """Prometheus' string value as a float, None when it is not a measurement."""
    value = float(text)
    return value if math.isfinite(value) else None


@dataclass(slots=True)
class FieldReading:
    """What one pool's rollup series said about one field."""

    value: Value = None
    source: str | None = None
    present: bool = False  # a series exists, even when its value is NaN
    conflict: bool = False  # series disagree: the field is null, whatever `value` says

    @property
    def measured(self) -> Value:
        return None if self.conflict else self.value


@dataclass
class PoolSnapshot:
    """Every pool's summary at one evaluation time, plus what it was built from."""

    generated_at: float
    pools: dict[str, dict[str, Any]]
    readings: dict[str, dict[str, FieldReading]] = field(repr=False)
    rejected: Counter[str] = field(default_factory=Counter)
    series: int = 0
    failed_queries: int = 0  # shards that failed: their fields are null
    _encoded: bytes | None = field(default=None, init=False, repr=False)

    def encoded_pools(self) -> bytes:
        """The `pools` object as JSON, encoded once however often it is served."""
        if self._encoded is None:
            self._encoded = encode_json(self.pools)
        return self._encoded


@contextmanager
def gc_paused() -> Iterator[None]:
    """Hold the cyclic GC while building one snapshot's ~100,000 acyclic containers.

    Left on, every 700 allocations trigger a collection that rescans the growing
    heap: at 1,000 pools that more than doubled the time to parse and build.
    Nothing built here forms a cycle, so reference counting frees it all anyway.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def encode_json(obj: Any) -> bytes:
    """The one encoding both bridges use; allow_nan=False makes a leaked NaN an error."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode()


async def read_snapshot(query: InstantQuery, at: float, shards: int = 1) -> PoolSnapshot:
    """Every shard at the same evaluation time: the snapshot is consistent by construction.

    A shard that fails leaves its fields null (so data_quality is at most partial) and
    is counted in `failed_queries`; when every shard fails the first error is raised.
    """
    queries = snapshot_queries(shards)
    results = await asyncio.gather(*(query(q, at) for q in queries), return_exceptions=True)
    failures = [r for r in results if isinstance(r, BaseException)]
    for failure in failures:
        if not isinstance(failure, Exception):
            raise failure  # cancellation and the like are not a failed query
        log.warning("snapshot query failed at %s: %s", at, failure)
    if len(failures) == len(results):
        raise failures[0]
    snapshot = build_snapshot(
        chain.from_iterable(r for r in results if not isinstance(r, BaseException)), at)
    snapshot.failed_queries = len(failures)
    return snapshot


def build_summaries(samples: Iterable[Sample], evaluated_at: float) -> dict[str, dict[str, Any]]:
    """Summaries by proxy_id; every proxy_id seen in any proxy_pool: series is a pool."""
    return build_snapshot(samples, evaluated_at).pools


def build_snapshot(samples: Iterable[Sample], evaluated_at: float) -> PoolSnapshot:
    with gc_paused():
        readings, rejected, series = _index(samples)
        pools = {pid: _summary(pid, evaluated_at, readings[pid]) for pid in sorted(readings)}
    return PoolSnapshot(evaluated_at, pools, readings, rejected, series)


# --- indexing samples by pool and field ---------------------------------------

# rollup name -> the fields it feeds, each with the extra labels that select it.
_BY_ROLLUP: dict[str, tuple[tuple[Field, tuple[tuple[str, str], ...]], ...]] = {}
for _f in FIELDS:
    _BY_ROLLUP[_f.rollup] = (*_BY_ROLLUP.get(_f.rollup, ()), (_f, tuple(_f.matchers.items())))


def _index(samples: Iterable[Sample]) -> tuple[
        dict[str, dict[str, FieldReading]], Counter[str], int]:
    """Readings by proxy_id, then by field path (the rules' data_quality under its path).

    This loop runs once per series (34,000 at 1,000 pools), hence the inlined fast
    path for the common case: a numeric field seen for the first time.
    """
    readings: dict[str, dict[str, FieldReading]] = {}
    rejected: Counter[str] = Counter()
    series = 0
    for labels, value in samples:
        series += 1
        name = labels.get("__name__", "")
        pid = labels.get("proxy_id")
        if not name.startswith(ROLLUP_PREFIX):
            rejected["not_a_rollup"] += 1
            continue
        if not pid:
            rejected["no_proxy_id"] += 1
            continue
        pool = readings.get(pid)
        if pool is None:
            pool = readings[pid] = {}
        targets = _BY_ROLLUP.get(name)
        if targets is None:
            if name == DATA_QUALITY_ROLLUP:
                _read_state(_reading(pool, DATA_QUALITY_PATH), labels, DATA_QUALITY_LABEL,
                            value, rejected, allowed=QUALITIES)
            continue
        for f, matchers in targets:
            if matchers and any(labels.get(k) != v for k, v in matchers):
                continue
            if f.kind is Kind.STATE:
                _read_state(_reading(pool, f.path), labels, f.state_label, value, rejected)
            elif f.path in pool:
                # Two series for one field of one pool: picking either would be a guess.
                rejected["duplicate_series"] += 1
                pool[f.path].conflict = True
            else:
                pool[f.path] = FieldReading(_number(f, value, rejected), labels.get("source"),
                                            present=True)
    return readings, rejected, series


def _reading(pool: dict[str, FieldReading], key: str) -> FieldReading:
    reading = pool.get(key)
    if reading is None:
        reading = pool[key] = FieldReading()
    return reading


def _number(f: Field, value: float | None, rejected: Counter[str]) -> float | int | None:
    if value is None:
        return None
    if f.kind is Kind.COUNT:
        if value < 0 or not value.is_integer():
            rejected["invalid_count"] += 1
            return None
        return int(value)
    return value * f.scale if f.scale != 1.0 else value


def _read_state(reading: FieldReading, labels: Mapping[str, str], state_label: str,
                value: float | None, rejected: Counter[str],
                allowed: Sequence[str] | None = None) -> None:
    """One-hot state sets: the state whose series is 1 is the value, exactly one may be."""
    reading.present = True
    reading.source = reading.source or labels.get("source")
    if value != 1:
        return
    state = labels.get(state_label)
    if not state or (allowed is not None and state not in allowed):
        rejected["unknown_state"] += 1
    elif reading.value is not None and reading.value != state:
        rejected["ambiguous_state"] += 1
        reading.conflict = True
    else:
        reading.value = state


# --- the summary --------------------------------------------------------------

_SECTION_FIELDS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = tuple(
    (s, tuple((f.key, f.path) for f in FIELDS if f.section == s)) for s in SECTIONS)
_GROUP_PATHS: tuple[tuple[str, tuple[str, ...]], ...] = tuple(
    (g, tuple(f.path for f in FIELDS if f.group == g)) for g in QUALITY_GROUPS)
_DQ_SECTION, _DQ_KEY = DATA_QUALITY_PATH.split(".", 1)
_EMPTY = FieldReading()


def _summary(pid: str, evaluated_at: float, pool: dict[str, FieldReading]) -> dict[str, Any]:
    values = {f.path: pool.get(f.path, _EMPTY).measured for f in FIELDS}
    sections: dict[str, dict[str, Value]] = {
        section: {key: values[path] for key, path in fields} for section, fields in _SECTION_FIELDS}
    known = sum(v is not None for v in values.values())
    rule_quality = pool.get(DATA_QUALITY_PATH, _EMPTY).measured
    sections[_DQ_SECTION][_DQ_KEY] = _worse(_quality(known, len(values)), rule_quality)
    return {
        "schema_version": SCHEMA_VERSION,
        "proxy_id": pid,
        "generated_at": evaluated_at,
        "metric_source": {key: pool.get(path, _EMPTY).source or UNKNOWN_SOURCE
                          for key, path in METRIC_SOURCE_FIELDS.items()},
        "metric_quality": {
            group: _quality(sum(values[p] is not None for p in paths), len(paths))
            for group, paths in _GROUP_PATHS},
        **sections,
    }


def _quality(known: int, total: int) -> str:
    if known == total:
        return "complete"
    return "missing" if known == 0 else "partial"


def _worse(a: str, b: Value) -> str:
    return max(a, b, key=QUALITIES.index) if isinstance(b, str) else a
