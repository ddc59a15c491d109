"""The last 15 minutes of each pool's load ratio and saturation, for the status page and CLI.

Read with two range queries over the rollups the summary serves, each slot the
highest value the rules wrote in its step. Windows are aligned to the step, so the
newest slot is up to one step older than the summary: every reader within one step
asks Prometheus the same question and gets the same points, and a reader kept across
steps (TrendReader) asks once per step.

A slot without a point is None: the rollup was absent then (no members, no capacity,
Prometheus not yet running, its rules stalled), which is unknown, never idle.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from poolscope.bridge.promapi import PrometheusAPI, RangeSeries
from poolscope.bridge.promql import pool_matcher
from poolscope.contract.fields import FIELDS
from poolscope.contract.thresholds import SCRAPE_INTERVAL_S

TREND_WINDOW_S = 900.0
# Three scrape (and rule evaluation) intervals: a load lasting that long always lands on
# a point, while 61 points still fit a terminal line and keep a fleet's answer small.
TREND_STEP_S = 3 * SCRAPE_INTERVAL_S
if TREND_WINDOW_S % TREND_STEP_S:
    raise ValueError(f"a {TREND_STEP_S} s step does not divide the {TREND_WINDOW_S} s window")
TREND_POINTS = int(TREND_WINDOW_S // TREND_STEP_S) + 1  # start to end inclusive
# The pools whose reads TrendReader keeps: the fleet and the pools people drill into.
MAX_KEPT = 64

_ROLLUPS = {f.path: f.rollup for f in FIELDS}
LOAD_RATIO_ROLLUP = _ROLLUPS["load.load_ratio"]
SATURATION_ROLLUP = _ROLLUPS["load.saturation"]
_SERIES = ("load_ratio", "saturation")

Slots = tuple[float | None, ...]


@dataclass(frozen=True)
class Trend:
    """One pool's values, one slot per step from the window's start to its end."""

    load_ratio: Slots
    saturation: Slots


@dataclass(frozen=True)
class Trends:
    """One window's trends of every pool read; as a document (`as_dict`) it crosses
    from the bridge to the CLI, which takes it back with `from_dict`."""

    start: float
    end: float
    step_s: float
    pools: Mapping[str, Trend]
    backend: str | None = None  # which Prometheus answered (None: not said)

    @property
    def window_s(self) -> float:
        return self.end - self.start

    def as_dict(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "step_s": self.step_s,
                "window_s": self.window_s, "backend": self.backend,
                "series": {"load_ratio": LOAD_RATIO_ROLLUP, "saturation": SATURATION_ROLLUP},
                "pools": {pool: {name: list(getattr(trend, name)) for name in _SERIES}
                          for pool, trend in self.pools.items()}}

    @classmethod
    def from_dict(cls, doc: Any) -> Trends:
        """`as_dict`'s document, refused with ValueError unless every pool has a
        number or null for every step: a client must not draw a trend it misreads."""
        if not isinstance(doc, Mapping):
            raise ValueError(f"trends: expected an object, got {type(doc).__name__}")
        start, end, step, window = (_number(doc, key)
                                    for key in ("start", "end", "step_s", "window_s"))
        if step <= 0 or window <= 0 or not math.isclose(end - start, window, abs_tol=1e-3):
            raise ValueError(f"trends: window {start}..{end} is not {window} s")
        points = _points(window, step)
        if points is None:
            raise ValueError(f"trends: step {step} s does not divide the window {window} s")
        pools = doc.get("pools")
        if not isinstance(pools, Mapping):
            raise ValueError("trends: pools is not an object")
        backend = doc.get("backend")
        return cls(start, end, step, MappingProxyType(
            {pool: _trend_of(pool, entry, points) for pool, entry in pools.items()}),
            backend if isinstance(backend, str) else None)


async def read_trends(api: PrometheusAPI, at: float, proxy_id: str | None = None) -> Trends:
    """Every pool's trends (or `proxy_id`'s alone) in the window ending at the step
    `at` falls in. Raises AllBackendsFailed when either series fails: a trend without
    one series would show as unknown what was never asked about."""
    start, end = _window(at)
    queries = [asyncio.ensure_future(api.query_range(
        _query(rollup, proxy_id), start, end, TREND_STEP_S))
        for rollup in (LOAD_RATIO_ROLLUP, SATURATION_ROLLUP)]
    try:
        load, saturation = await asyncio.gather(*queries)
    except BaseException:
        for query in queries:  # the one still asking would only be thrown away
            query.cancel()
        raise
    loads, saturations = (_slotted(r.series, start) for r in (load, saturation))
    unknown: Slots = (None,) * TREND_POINTS
    return Trends(start, end, TREND_STEP_S, MappingProxyType({
        pool: Trend(loads.get(pool, unknown), saturations.get(pool, unknown))
        for pool in sorted(loads.keys() | saturations.keys())}), load.backend)


class TrendReader:
    """read_trends, once per step and key (a pool, or None for the fleet). Callers in
    one step share the read and its outcome, a failure included: a Prometheus that
    hangs costs one timeout per step, not one per page view. The next step asks
    again; a caller whose clock lags into an earlier step gets the newer read."""

    def __init__(self, api: PrometheusAPI) -> None:
        self._api = api
        self._kept: dict[str | None, tuple[float, asyncio.Task[Trends]]] = {}

    async def read(self, at: float, proxy_id: str | None = None) -> Trends:
        _, end = _window(at)
        kept = self._kept.get(proxy_id)
        if kept is None or kept[0] < end:
            task = asyncio.ensure_future(read_trends(self._api, at, proxy_id))
            task.add_done_callback(_retrieve)
            self._kept.pop(proxy_id, None)
            self._kept[proxy_id] = (end, task)
            while len(self._kept) > MAX_KEPT:
                del self._kept[next(iter(self._kept))]
        else:
            task = kept[1]
        # Shielded: a caller that gives up does not cancel the read the others wait on.
        return await asyncio.shield(task)

    def close(self) -> None:
        """Cancel the reads still asking: nobody will wait for them."""
        for _, task in self._kept.values():
            task.cancel()
        self._kept.clear()


def _retrieve(task: asyncio.Task[Trends]) -> None:
    """Mark a failure seen: one that no caller stayed to await is no crash to report."""
    if not task.cancelled():
        task.exception()


def _window(at: float) -> tuple[float, float]:
    end = math.floor(at / TREND_STEP_S) * TREND_STEP_S
    return end - TREND_WINDOW_S, end


def _points(window_s: float, step_s: float) -> int | None:
    """Slots from start to end inclusive; None when the step does not divide the window."""
    steps = round(window_s / step_s)
    return steps + 1 if math.isclose(steps * step_s, window_s, abs_tol=1e-6) else None


def _query(rollup: str, proxy_id: str | None) -> str:
    """One series per pool, a slot its step's highest value: a peak between two steps
    is kept, and a step in which the rules wrote nothing is a gap, where a plain
    selector would carry the last value on for the lookback (5 minutes) and draw an
    outage as data. Should two series carry one pool's id, the busier counts."""
    selector = rollup if proxy_id is None else f"{rollup}{{{pool_matcher(proxy_id)}}}"
    return f"max by (proxy_id) (max_over_time({selector}[{TREND_STEP_S:g}s]))"


def _slotted(series: Iterable[RangeSeries], start: float) -> dict[str, Slots]:
    """Each pool's points in their slots (a point off the grid in the nearest); NaN and
    infinities are not measurements, and two points for one slot keep the larger."""
    pools: dict[str, list[float | None]] = {}
    for metric, values in series:
        pool = metric.get("proxy_id")
        if pool is None:
            continue
        slots = pools.setdefault(pool, [None] * TREND_POINTS)
        for t, value in values:
            index = round((t - start) / TREND_STEP_S)
            if 0 <= index < TREND_POINTS and math.isfinite(value):
                held = slots[index]
                slots[index] = value if held is None else max(held, value)
    return {pool: tuple(slots) for pool, slots in pools.items()}


def _number(doc: Mapping[str, Any], key: str) -> float:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"trends: {key} is not a finite number: {value!r}")
    return float(value)


def _trend_of(pool: Any, entry: Any, points: int) -> Trend:
    if not isinstance(pool, str) or not isinstance(entry, Mapping):
        raise ValueError(f"trends: pool {pool!r} is not an object under a string id")
    return Trend(*(_slots_of(pool, name, entry.get(name), points) for name in _SERIES))


def _slots_of(pool: str, name: str, values: Any, points: int) -> Slots:
    if not isinstance(values, list) or len(values) != points:
        raise ValueError(f"trends: {pool}.{name} is not a list of {points} values")
    for value in values:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                  or not math.isfinite(value)):
            raise ValueError(f"trends: {pool}.{name} holds {value!r}, not a number or null")
    return tuple(None if v is None else float(v) for v in values)
