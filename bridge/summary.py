"""Pool summaries (schema_version 1) from `proxy_pool:*` samples of one evaluation.

Free of aiohttp and of any server so that the Proxy bridge can import it and serve,
byte for byte, the summary the Scheduler bridge serves for the same pool: both build it
here and encode it with `encode_json`.

The contract (docs/design.md): a field is `null` unless its rollup holds a measured value at
the evaluation time; NaN and infinities are not measurements. Samples that cannot be
turned into a value honestly (two series for one field, a fractional count, an unknown
state) leave the field null and are counted in `PoolSnapshot.rejected` by reason, so a
bad rule shows up on /metrics instead of as a plausible number (rollup_index.py).
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from operator import itemgetter
from typing import Any, overload

import orjson

from poolscope.bridge.rollup_index import (
    ABSENT,
    DATA_QUALITY_SLOT,
    FIELD_SLOTS,
    GPU_KEYS,
    QUALITIES,
    SLOT_FIELDS,
    SLOT_OF,
    SLOT_PATHS,
    PoolIndex,
    index_pairs,
)
from poolscope.contract.fields import (
    DATA_QUALITY_PATH,
    GPUS_SECTION,
    METRIC_SOURCE_FIELDS,
    QUALITY_GROUPS,
    SECTIONS,
)

SCHEMA_VERSION = 1
UNKNOWN_SOURCE = "unknown"

Value = float | int | str | None


# One series of an instant vector: its labels and its value, None for NaN / infinities.
Sample = tuple[Mapping[str, str], float | None]


InstantQuery = Callable[[str, float], Awaitable[Sequence[Sample]]]


def parse_value(text: str) -> float | None:
    """Prometheus' string value as a float, None when it is not a measurement."""
    value = float(text)
    return value if math.isfinite(value) else None


class Vector(Sequence[Sample]):
    """An instant vector as two parallel sequences: label sets, and values as parsed.

    promapi fills them with whole-list operations over the answer, and hands every
    answer with the last one's series the same label sets (vector_layout). Values keep
    NaN and infinities; seen as a Sequence[Sample] they are None. promapi gives values
    as an array of doubles: unlike a list of floats, the cyclic GC does not walk it
    (34,000 references at 1,000 pools, on every collection while it lives).
    """

    __slots__ = ("labels", "values")

    def __init__(self, labels: Sequence[Mapping[str, str]], values: Sequence[float]) -> None:
        if len(labels) != len(values):
            raise ValueError("a label set for every value")
        self.labels = labels
        self.values = values

    @classmethod
    def join(cls, parts: Iterable[Vector]) -> Vector:
        labels: list[Mapping[str, str]] = []
        values = array("d")
        for part in parts:
            labels += part.labels
            values.extend(part.values)
        return cls(labels, values)

    def __len__(self) -> int:
        return len(self.values)

    @overload
    def __getitem__(self, index: int) -> Sample: ...

    @overload
    def __getitem__(self, index: slice) -> Vector: ...

    def __getitem__(self, index: int | slice) -> Sample | Vector:
        if isinstance(index, slice):
            return Vector(self.labels[index], self.values[index])
        value = self.values[index]
        return self.labels[index], value if math.isfinite(value) else None


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
    index: PoolIndex = field(repr=False)
    failed_queries: int = 0  # shards that failed: their fields are null
    # When the rules wrote what was read (None: unknown); queries.read_snapshot sets it.
    rollups_at: float | None = None
    # What the HTTP layer rendered from this snapshot (bridge/http_cache.py): kept with
    # it so that a body is rendered once per snapshot and freed when it is replaced.
    renders: dict[Hashable, Any] = field(default_factory=dict, init=False, repr=False,
                                         compare=False)

    @property
    def rejected(self) -> Counter[str]:
        return self.index.rejected

    @property
    def series(self) -> int:
        return self.index.series

    @cached_property
    def readings(self) -> dict[str, dict[str, FieldReading]]:
        """Readings by proxy_id, then field path: only fields with a series are there.

        Built on demand (for /debug/pool_resource_sources) from the compact slots.
        """
        conflicts = self.index.conflicts
        sources = self.index.sources
        return {pid: {path: FieldReading(values[i], source, True, (pid, i) in conflicts)
                      for i, (path, source) in enumerate(zip(SLOT_PATHS, sources[pid], strict=True))
                      if source is not ABSENT}
                for pid, values in self.index.pools.items()}


def encode_json(obj: Any) -> bytes:
    """The one encoding both bridges use: compact UTF-8, keys in insertion order.

    orjson writes NaN and infinities as null, which is what they mean here (not a
    measurement), so a value that slipped past the checks still never reads as a number.
    """
    try:
        return orjson.dumps(obj)
    except orjson.JSONEncodeError:
        # Keys that are not strings (json.dumps wrote them as strings, so does this):
        # an option that costs ~50% on every call, so only when it is needed.
        return orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS)


def build_summaries(samples: Iterable[Sample], evaluated_at: float) -> dict[str, dict[str, Any]]:
    """Summaries by proxy_id; every proxy_id seen in any proxy_pool: series is a pool."""
    return build_snapshot(samples, evaluated_at).pools


def build_snapshot(samples: Iterable[Sample], evaluated_at: float) -> PoolSnapshot:
    # A Vector's values as parsed: the index reads NaN and infinities as no measurement.
    index = index_pairs(zip(samples.labels, samples.values, strict=True)
                        if isinstance(samples, Vector) else samples)
    pools, sources, gpus = index.pools, index.sources, index.gpus
    pools_out = {pid: _summary(pid, evaluated_at, pools[pid], sources[pid], gpus.get(pid))
                 for pid in sorted(pools)}
    return PoolSnapshot(evaluated_at, pools_out, index)


# --- the summary, from one pool's slots ---------------------------------------

def _picker(slots: Sequence[int]) -> Callable[[list[Any]], tuple[Any, ...]]:
    """The values at `slots` as a tuple, in C (itemgetter alone unwraps a single one)."""
    if len(slots) == 1:
        only = slots[0]
        return lambda values: (values[only],)
    if not slots:
        return lambda values: ()
    return itemgetter(*slots)


def _sections() -> tuple[tuple[str, tuple[str, ...], int, int], ...]:
    """(section, its keys, first slot, end slot): rollup_index makes each a slice."""
    out = []
    start = 0
    for s in SECTIONS:
        keys = tuple(f.key for f in SLOT_FIELDS if f.section == s)
        out.append((s, keys, start, start + len(keys)))
        start += len(keys)
    return tuple(out)


_SECTIONS = _sections()
_DQ_SECTION, _DQ_KEY = DATA_QUALITY_PATH.split(".", 1)
def _by_known(total: int) -> tuple[str, ...]:
    """Quality by how many of `total` fields are known (a lookup, not a call per pool)."""
    return tuple("complete" if known == total else "missing" if known == 0 else "partial"
                 for known in range(total + 1))


_FIELDS_QUALITY = _by_known(FIELD_SLOTS)
_GROUPS: tuple[tuple[str, Callable[[list[Any]], tuple[Any, ...]], int, tuple[str, ...]], ...] = (
    tuple((g, _picker(slots), len(slots), _by_known(len(slots)))
          for g in QUALITY_GROUPS
          for slots in [[i for i, f in enumerate(SLOT_FIELDS) if f.group == g]]))
# The worse of what the nulls say and the rules' verdict (None: the rules gave none).
_WORSE: dict[tuple[str, str | None], str] = {
    (a, b): a if b is None else max(a, b, key=QUALITIES.index)
    for a in QUALITIES for b in (*QUALITIES, None)}
_SOURCES: tuple[tuple[str, int], ...] = tuple(
    (key, SLOT_OF[path]) for key, path in METRIC_SOURCE_FIELDS.items())


def _summary(pid: str, evaluated_at: float, slots: Sequence[Any], sources: Sequence[Any],
             gpus: dict[str, list[Any]] | None) -> dict[str, Any]:
    # Not strict: `_sections` sizes every slice to its keys, and the check cost 15% here.
    sections = {s: dict(zip(keys, slots[start:end], strict=False))
                for s, keys, start, end in _SECTIONS}
    sections[_DQ_SECTION][_DQ_KEY] = _WORSE[
        _FIELDS_QUALITY[FIELD_SLOTS - slots[:FIELD_SLOTS].count(None)], slots[DATA_QUALITY_SLOT]]
    return {
        "schema_version": SCHEMA_VERSION,
        "proxy_id": pid,
        "generated_at": evaluated_at,
        "metric_source": {key: sources[i] or UNKNOWN_SOURCE for key, i in _SOURCES},
        "metric_quality": {group: by_known[total - pick(slots).count(None)]
                           for group, pick, total, by_known in _GROUPS},
        **sections,
        GPUS_SECTION: _gpus(gpus),
    }


def _gpus(models: dict[str, list[Any]] | None) -> dict[str, dict[str, Any]] | None:
    """GPU capacity by gpu_model; null, not {}, when no GPU series names the pool.

    Null because the rollups cannot tell a pool without GPUs from one whose GPUs are
    not read (fields.GPUS_SECTION); every model listed has at least one series.
    """
    if models is None:
        return None
    return {model: {key: None if value is ABSENT else value
                    for key, value in zip(GPU_KEYS, values, strict=True)}
            for model, values in sorted(models.items())}
