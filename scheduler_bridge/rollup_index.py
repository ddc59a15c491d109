"""An instant vector into per-pool slots of field values, in two steps.

Which slot of which pool a series fills, its `source`, and whether two series claim
one field depend only on the label sets, and those stay the same from one refresh to
the next. So an `IndexPlan` works that out once per label layout (a route table built
at import maps a rollup name, and where fields.py selects by a label that label's
value, to its slot), and `IndexPlan.apply` does only the value-dependent rest, with
whole-list operations that run in C. At 1,000 pools (34,000 series) that took the
index from 17 ms a refresh to 5.

A pool's values are a tuple, one per slot (None: unmeasured), and its sources another
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

import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from math import isfinite
from operator import itemgetter, mul
from typing import Any

from scheduler_bridge.fields import (
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

# Routes: (operation, value slot, source slot, argument).
_NUMBER, _COUNT, _STATE, _SELECT, _GPU = range(5)
Route = tuple[int, int, int, Any]
# One (pool, gpu_model)'s values in GPU_FIELDS order; ABSENT until a series is seen.
GPU_KEYS: tuple[str, ...] = tuple(f.key for f in GPU_FIELDS)
_GPU_TEMPLATE: list[Any] = [ABSENT] * len(GPU_FIELDS)


def _route(f: Field) -> Route:
    slot = SLOT_OF[f.path]
    if f.kind is Kind.STATE:
        return (_STATE, slot, slot + SLOTS, (f.state_label, None))
    if f.kind is Kind.COUNT:
        return (_COUNT, slot, slot + SLOTS, None)
    return (_NUMBER, slot, slot + SLOTS, f.scale)


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
            routes[rollup] = (_SELECT, -1, -1,
                              (label, {f.matchers[label]: _route(f) for f in fields}))
    for rollup, label, fields in _by_rollup(GPU_FIELDS):
        # (selecting label, {its value: (GPU slot, is a count)}); None selects all.
        table = {f.matchers[label] if label else None: (GPU_KEYS.index(f.key),
                                                         f.kind is Kind.COUNT)
                 for f in fields}
        routes[rollup] = (_GPU, -1, -1, (label, table))
    slot = SLOT_OF[DATA_QUALITY_PATH]
    routes[DATA_QUALITY_ROLLUP] = (_STATE, slot, slot + SLOTS, (DATA_QUALITY_LABEL, QUALITIES))
    return routes


_ROUTES = _routes()


@dataclass
class PoolIndex:
    """Every pool's slots, what was rejected and why, and the field conflicts."""

    pools: dict[str, tuple[Any, ...]]  # proxy_id -> value per slot (None: unmeasured)
    # proxy_id -> `source` label per slot (ABSENT: no series); the label sets decide it,
    # so it is shared by every index of the same plan.
    sources: dict[str, tuple[Any, ...]]
    rejected: Counter[str]
    series: int
    conflicts: set[tuple[str, int]]  # (proxy_id, slot): series disagreed, value is null
    # proxy_id -> gpu_model -> values in GPU_KEYS order (ABSENT: no series); only pools
    # with a GPU series are here, and every one of them is in `pools` too.
    gpus: dict[str, dict[str, list[Any]]] = field(default_factory=dict)


# In a plan, a pool's value slots hold positions in the list `IndexPlan.apply` gathers
# from: 0 is None (no series fills the slot), 1 + i is series i's scaled number, or for
# a state set, the cell its hot state is written to (the set's first series' position);
# 1 + len(series) + k is the k-th count.
_UNFILLED = 0
_PLAN_TEMPLATE: list[Any] = [_UNFILLED] * SLOTS + [ABSENT] * SLOTS
# A one-hot state series: (position, its set's cell, route argument, labels, pool, slot).
StateRow = tuple[int, int, tuple[str, tuple[str, ...] | None], Mapping[str, str], str, int]
GpuRow = tuple[int, str, Any, Mapping[str, str]]


class IndexPlan:
    """Everything the label sets decide, worked out once for as long as they hold.

    Which pool and slot each series fills, the sources, duplicates and what is rejected
    for its labels alone depend on the label sets only, and those stay the same from
    one refresh to the next (vector_layout). `apply` then does the value-dependent rest
    with whole-list operations that run in C (a scale per series, one gather per pool)
    and a Python step only for the series whose value decides something: hot states,
    GPU counts, and values that are not finite.
    """

    __slots__ = ("_count_at", "_gpus", "_picks", "_scales", "_state_cells", "_states",
                 "conflicts", "labels", "rejected", "sources")

    def __init__(self, labels: Sequence[Mapping[str, str]]) -> None:
        self.labels = labels
        self.rejected: Counter[str] = Counter()
        self.conflicts: set[tuple[str, int]] = set()
        self._scales = [1.0] * len(labels)
        self._count_at: list[int] = []
        self._state_cells: list[int] = []
        self._states: list[StateRow] = []
        self._gpus: list[GpuRow] = []
        pools = self._route_all(labels)
        for pid, slot in self.conflicts:  # duplicates: null whatever the values
            pools[pid][slot] = _UNFILLED
        self._picks = [(pid, itemgetter(*slots[:SLOTS])) for pid, slots in pools.items()]
        self.sources = {pid: tuple(slots[SLOTS:]) for pid, slots in pools.items()}

    def _route_all(self, labels: Sequence[Mapping[str, str]]) -> dict[str, list[Any]]:
        pools: dict[str, list[Any]] = {}
        routes = _ROUTES
        counts_from = 1 + len(labels)
        for i, series in enumerate(labels):
            try:  # subscripts, not .get(): cheaper, and a miss is the rare case
                op, slot, source_slot, arg = routes[series["__name__"]]
                pid = series["proxy_id"]
            except KeyError:
                _unrouted(series, pools, self.rejected)
                continue
            if not pid:
                self.rejected["no_proxy_id"] += 1
                continue
            slots = pools.get(pid) or pools.setdefault(pid, _PLAN_TEMPLATE.copy())
            if op == _SELECT:
                selected = arg[1].get(series.get(arg[0]))
                if selected is None:
                    continue  # a series of the rollup that no field selects
                op, slot, source_slot, arg = selected
            if op in (_NUMBER, _COUNT):
                if slots[source_slot] is not ABSENT:
                    # Two series for one field of one pool: picking either would be a guess.
                    self.rejected["duplicate_series"] += 1
                    self.conflicts.add((pid, slot))
                    continue
                slots[source_slot] = series.get("source")
                if op == _NUMBER:
                    self._scales[i] = arg
                    slots[slot] = 1 + i
                else:
                    slots[slot] = counts_from + len(self._count_at)
                    self._count_at.append(i)
            elif op == _GPU:
                self._gpus.append((i, pid, arg, series))
            else:
                if not slots[source_slot]:  # absent, or present without a source so far
                    slots[source_slot] = series.get("source")
                if slots[slot] == _UNFILLED:
                    slots[slot] = 1 + i
                    self._state_cells.append(1 + i)
                self._states.append((i, slots[slot], arg, series, pid, slot))
        return pools

    def apply(self, values: Sequence[float]) -> PoolIndex:
        """The index of these values (one per label set; NaN: not a measurement)."""
        if len(values) != len(self.labels):
            raise ValueError("a value for every label set")
        rejected = self.rejected.copy()
        conflicts = set(self.conflicts)
        finite = all(map(isfinite, values))
        gathered: list[Any] = [None]
        gathered += map(mul, values, self._scales)
        if not finite:
            for i, ok in enumerate(map(isfinite, values), 1):
                if not ok:
                    gathered[i] = None
        for cell in self._state_cells:
            gathered[cell] = None
        ambiguous: list[int] = []
        for i, cell, arg, series, pid, slot in self._states:
            if values[i] == 1 and _hot_state(gathered, cell, arg, series, rejected):
                conflicts.add((pid, slot))
                ambiguous.append(cell)
        for cell in ambiguous:  # after all of them: a third state cannot revive the cell
            gathered[cell] = None
        gathered += self._counts(values, finite, rejected)
        gpus: dict[str, dict[str, list[Any]]] = {}
        for i, pid, arg, series in self._gpus:
            value = values[i]
            _read_gpu(gpus, pid, arg, series, value if isfinite(value) else None, rejected)
        pools = {pid: pick(gathered) for pid, pick in self._picks}
        return PoolIndex(pools, self.sources, rejected, len(values), conflicts, gpus)

    def _counts(self, values: Sequence[float], finite: bool,
                rejected: Counter[str]) -> list[int | None]:
        raw = [values[i] for i in self._count_at]
        if finite and all(map(float.is_integer, raw)) and (
                not raw or (min(raw) >= 0.0 and max(raw) <= MAX_COUNT)):
            return list(map(int, raw))
        return [_count(v if isfinite(v) else None, rejected) for v in raw]


# Plans by the identity of the label-set tuple they were made for: vector_layout hands
# the same tuple to every refresh whose series did not change. Tuples only, since a list
# could change under the same identity; the plan holds its tuple, so the id stays taken.
# A plan holds its label sets (~14 MB at 1,000 pools; the plan itself ~3 MB): keep only
# the few in use, one per snapshot query that has a layout; the oldest goes first.
_PLANS: dict[int, IndexPlan] = {}
MAX_PLANS = 4


def plan_for(labels: Sequence[Mapping[str, str]]) -> IndexPlan:
    """The plan for these label sets: the kept one for a tuple seen before."""
    if not isinstance(labels, tuple):
        return IndexPlan(labels)
    plan = _PLANS.get(id(labels))
    if plan is None or plan.labels is not labels:
        plan = IndexPlan(labels)
        while len(_PLANS) >= MAX_PLANS:
            del _PLANS[next(iter(_PLANS))]
        _PLANS[id(labels)] = plan
    return plan


def index_vector(labels: Sequence[Mapping[str, str]], values: Sequence[float]) -> PoolIndex:
    """Slots by proxy_id; every proxy_id seen in any proxy_pool: series is a pool."""
    return plan_for(labels).apply(values)


def index_pairs(pairs: Iterable[Pair]) -> PoolIndex:
    """`index_vector` of (labels, value) pairs; a None value is not a measurement."""
    labels: list[Mapping[str, str]] = []
    values: list[float] = []
    for series, value in pairs:
        labels.append(series)
        values.append(math.nan if value is None else float(value))
    return index_vector(labels, values)


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


def _unrouted(labels: Mapping[str, str], pools: dict[str, list[Any]],
              rejected: Counter[str]) -> None:
    """A rollup no field reads still makes its pool known; anything else is rejected."""
    pid = labels.get("proxy_id")
    if not (labels.get("__name__") or "").startswith(ROLLUP_PREFIX):
        rejected["not_a_rollup"] += 1
    elif not pid:
        rejected["no_proxy_id"] += 1
    elif pid not in pools:
        pools[pid] = _PLAN_TEMPLATE.copy()


def _hot_state(cells: list[Any], cell: int, arg: tuple[str, tuple[str, ...] | None],
               labels: Mapping[str, str], rejected: Counter[str]) -> bool:
    """A one-hot state series whose value is 1: its state is the set's value if it is
    the only one; True when another state is hot too (the set is then null)."""
    state_label, allowed = arg
    state = labels.get(state_label)
    if not state or (allowed is not None and state not in allowed):
        rejected["unknown_state"] += 1
    elif cells[cell] is not None and cells[cell] != state:
        rejected["ambiguous_state"] += 1
        return True
    else:
        cells[cell] = state
    return False
