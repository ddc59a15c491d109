"""One pass over an instant vector, straight into per-pool slots of field values.

This loop runs once per series (34,000 per full read at 1,000 pools), so the work per
series is a few dict lookups and list stores: a route table built once at import maps
a rollup name (and, where fields.py selects by a label, that label's value) to the
slot it fills.

A pool's values are a list, one per slot (None: unmeasured), and its sources another
(`ABSENT`: no series at all). The correctness rules live here: two series for one
numeric field, or two states hot at once, make the field null and are counted by
reason in `rejected`; a count that is not a non-negative integer, and a state the
contract does not know, are rejected too. NaN and infinities are series without a
measurement: the field is wired (present) but null.

GPU capacity per model (fields.GPU_FIELDS) is keyed by a label value, so it cannot be
a fixed slot: those few series per pool go to a small list per (pool, gpu_model) in
`PoolIndex.gpus`, under the same rules (a duplicate is null and counted).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from poolscope.contract.fields import (
    DATA_QUALITY_LABEL,
    DATA_QUALITY_PATH,
    DATA_QUALITY_ROLLUP,
    FIELDS,
    GPU_FIELDS,
    GPU_MODEL_LABEL,
    SECTIONS,
    Field,
    Kind,
)

ROLLUP_PREFIX = "proxy_pool:"
QUALITIES = ("complete", "partial", "missing")  # best to worst
# Beyond 2**53 a float no longer holds every integer; no pool has that many Instances.
MAX_COUNT = 2.0**53

# A series of an instant vector: labels and value; a non-finite value (or None) is NaN.
Pair = tuple[Mapping[str, str], float | None]


class _Absent:
    """No series for this field. Falsy, so `source or "unknown"` reads as it should."""

    __slots__ = ()

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()

# Slot order: section by section, FIELDS order within each, so a section is a slice.
SLOT_FIELDS: tuple[Field, ...] = tuple(f for s in SECTIONS for f in FIELDS if f.section == s)
if len(SLOT_FIELDS) != len(FIELDS):
    raise ValueError("a field's section is not in fields.SECTIONS")
FIELD_SLOTS = len(SLOT_FIELDS)
DATA_QUALITY_SLOT = FIELD_SLOTS  # the rules' verdict, kept apart from the fields
SLOTS = FIELD_SLOTS + 1
SLOT_PATHS: tuple[str, ...] = (*(f.path for f in SLOT_FIELDS), DATA_QUALITY_PATH)
SLOT_OF: dict[str, int] = {path: i for i, path in enumerate(SLOT_PATHS)}

# Routes: (operation, slot, argument); a pool's values and sources share the slot.
_NUMBER, _COUNT, _STATE, _SELECT, _GPU = range(5)
Route = tuple[int, int, Any]
# One (pool, gpu_model)'s values in GPU_FIELDS order; ABSENT until a series is seen.
GPU_KEYS: tuple[str, ...] = tuple(f.key for f in GPU_FIELDS)
_GPU_TEMPLATE: list[Any] = [ABSENT] * len(GPU_FIELDS)


def _route(f: Field) -> Route:
    slot = SLOT_OF[f.path]
    if f.kind is Kind.STATE:
        return (_STATE, slot, (f.state_label, None))
    if f.kind is Kind.COUNT:
        return (_COUNT, slot, None)
    return (_NUMBER, slot, f.scale)


def _by_rollup(fields: Iterable[Field]) -> Iterator[tuple[str, str | None, list[Field]]]:
    """(rollup, the one label selecting among its fields or None, its fields)."""
    grouped: dict[str, list[Field]] = {}
    for f in fields:
        grouped.setdefault(f.rollup, []).append(f)
    for rollup, group in grouped.items():
        labels = {tuple(f.matchers) for f in group}
        if len(group) == 1 and labels == {()}:
            yield rollup, None, group
            continue
        if len(labels) != 1 or len(label := next(iter(labels))) != 1:
            raise ValueError(f"{rollup}: fields sharing a rollup must select by one label")
        if len({f.matchers[label[0]] for f in group}) != len(group):
            raise ValueError(f"{rollup}: two fields select the same series")
        yield rollup, label[0], group


def _routes() -> dict[str, Route]:
    """rollup name -> route; a rollup feeding several fields selects them by one label."""
    routes: dict[str, Route] = {}
    for rollup, label, fields in _by_rollup(FIELDS):
        if label is None:
            routes[rollup] = _route(fields[0])
        else:
            routes[rollup] = (_SELECT, -1, (label, {f.matchers[label]: _route(f) for f in fields}))
    for rollup, label, fields in _by_rollup(GPU_FIELDS):
        # (selecting label, {its value: (GPU slot, is a count)}); None selects all.
        table = {f.matchers[label] if label else None: (GPU_KEYS.index(f.key),
                                                         f.kind is Kind.COUNT)
                 for f in fields}
        routes[rollup] = (_GPU, -1, (label, table))
    routes[DATA_QUALITY_ROLLUP] = (_STATE, SLOT_OF[DATA_QUALITY_PATH],
                                   (DATA_QUALITY_LABEL, QUALITIES))
    return routes


_ROUTES = _routes()


@dataclass
class PoolIndex:
    """Every pool's slots, what was rejected and why, and the field conflicts."""

    pools: dict[str, list[Any]]  # proxy_id -> value per slot (None: unmeasured)
    sources: dict[str, list[Any]]  # proxy_id -> `source` label per slot (ABSENT: no series)
    rejected: Counter[str] = field(default_factory=Counter)
    series: int = 0
    conflicts: set[tuple[str, int]] = field(default_factory=set)  # (proxy_id, slot): null
    # proxy_id -> gpu_model -> values in GPU_KEYS order (ABSENT: no series); only pools
    # with a GPU series are here, and every one of them is in `pools` too.
    gpus: dict[str, dict[str, list[Any]]] = field(default_factory=dict)

    def slots(self, pid: str) -> tuple[list[Any], list[Any]]:
        """The pool's values and sources, made known (all unmeasured) on first sight."""
        if pid not in self.pools:
            self.pools[pid] = [None] * SLOTS
            self.sources[pid] = [ABSENT] * SLOTS
        return self.pools[pid], self.sources[pid]


def index_pairs(pairs: Iterable[Pair]) -> PoolIndex:
    """Slots by proxy_id; every proxy_id seen in any proxy_pool: series is a pool."""
    index = PoolIndex({}, {})
    rejected, conflicts = index.rejected, index.conflicts
    for labels, value in pairs:
        index.series += 1
        try:  # subscripts, not .get(): cheaper, and a miss is the rare case
            op, slot, arg = _ROUTES[labels["__name__"]]
            pid = labels["proxy_id"]
        except KeyError:
            _unrouted(labels, index)
            continue
        if not pid:
            rejected["no_proxy_id"] += 1
            continue
        values, sources = index.slots(pid)
        if op == _SELECT:
            selected = arg[1].get(labels.get(arg[0]))
            if selected is None:
                continue  # a series of the rollup that no field selects
            op, slot, arg = selected
        # x - x is 0.0 for finite x and NaN (truthy) for NaN and the infinities.
        if value is not None and value - value:
            value = None
        if op == _GPU:
            _read_gpu(index.gpus, pid, arg, labels, value, rejected)
        elif op == _STATE:
            _read_state(values, sources, slot, arg, labels, value, pid, rejected, conflicts)
        elif sources[slot] is not ABSENT:
            # Two series for one field of one pool: picking either would be a guess.
            rejected["duplicate_series"] += 1
            conflicts.add((pid, slot))
        else:
            sources[slot] = labels.get("source")
            values[slot] = (_count(value, rejected) if op == _COUNT
                            else None if value is None else value * arg)
    for pid, slot in conflicts:
        index.pools[pid][slot] = None
    return index


def _count(value: float | None, rejected: Counter[str]) -> int | None:
    """A count as an int; a value that cannot be one is rejected and stays null."""
    if value is None:
        return None
    if 0.0 <= value <= MAX_COUNT and value.is_integer():
        return int(value)
    rejected["invalid_count"] += 1
    return None


def _read_gpu(gpus: dict[str, dict[str, list[Any]]], pid: str,
              arg: tuple[str | None, dict[str | None, tuple[int, bool]]],
              labels: Mapping[str, str], value: float | None, rejected: Counter[str]) -> None:
    """One series of a GPU-per-model rollup into its (pool, gpu_model) values.

    A pool gets a `gpus` entry only from a series that names a model, so an entry is
    never an empty object standing for "no GPU" (fields.py: nothing can say that).
    """
    label, table = arg
    selected = table.get(labels.get(label) if label else None)
    if selected is None:
        return  # a series of the rollup that no field selects
    model = labels.get(GPU_MODEL_LABEL)
    if not model:
        rejected["no_gpu_model"] += 1
        return
    slot, is_count = selected
    values = gpus.setdefault(pid, {}).setdefault(model, _GPU_TEMPLATE.copy())
    if values[slot] is ABSENT:
        values[slot] = _count(value, rejected) if is_count else value
    else:
        # Two series for one value: null, and a third cannot revive it (not ABSENT).
        values[slot] = None
        rejected["duplicate_series"] += 1


def _unrouted(labels: Mapping[str, str], index: PoolIndex) -> None:
    """A rollup no field reads still makes its pool known; anything else is rejected."""
    pid = labels.get("proxy_id")
    if not (labels.get("__name__") or "").startswith(ROLLUP_PREFIX):
        index.rejected["not_a_rollup"] += 1
    elif not pid:
        index.rejected["no_proxy_id"] += 1
    else:
        index.slots(pid)


def _read_state(values: list[Any], sources: list[Any], slot: int,
                arg: tuple[str, tuple[str, ...] | None], labels: Mapping[str, str],
                value: float | None, pid: str, rejected: Counter[str],
                conflicts: set[tuple[str, int]]) -> None:
    """One-hot state sets: the state whose series is 1 is the value, exactly one may be."""
    if not sources[slot]:  # absent, or present without a source label so far
        sources[slot] = labels.get("source")
    if value != 1:
        return
    state_label, allowed = arg
    state = labels.get(state_label)
    if not state or (allowed is not None and state not in allowed):
        rejected["unknown_state"] += 1
    elif values[slot] is not None and values[slot] != state:
        rejected["ambiguous_state"] += 1
        conflicts.add((pid, slot))
    else:
        values[slot] = state
