"""The fleet at a glance: one view model for the terminal, `--json` and `GET /status`.

Every number on the status screen is chosen here, once, from a bridge snapshot, so the
three renderings cannot disagree about what they show; they only differ in how they
draw it. The view keeps the contract's distinctions rather than smoothing them over:

- `None` is unknown and stays `None`. A renderer draws it as "?", never as an empty
  bar, which would read as a measured 0.
- Unhealthy GPUs are counted apart from healthy ones and in no usage bar: they are
  neither used nor free capacity.
- Idle and idle-unknown Instances are separate numbers: an Instance with no dispatch
  since its Proxy started has no idle time, which is not a long one.

Per GPU model, as capacity: total, used, free and unhealthy. "Used" is busy
GPU-equivalents (the healthy GPUs' utilization summed, the `gpus.used` rollup), free
is the healthy rest; unhealthy GPUs are in neither.

Trends are one slot per step over the last 15 minutes (poolscope.bridge.trends); a
slot with no point is None, drawn as a gap, never as 0.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from poolscope.bridge.cache import Served
from poolscope.bridge.trends import Trend, Trends
from poolscope.contract.thresholds import FRESH_S
from poolscope.scheduler_bridge.client import (
    BridgeSnapshot,
    GpuCapacity,
    PoolSummary,
    parse_pool,
)

UNKNOWN = "?"
PERCENT = 100.0
# What each column means, for the legend under the table and the page's title text.
LEGEND = {
    "unknown": "not measured, which is not 0",
    "asleep": "its engine is asleep (vLLM's sleep mode): no capacity until woken",
    "missing": "alive, but no fresh resource data",
    "idle": "no dispatch for the idle threshold",
    "idle_unknown": "no dispatch since the Proxy started: unknown, not idle",
    "gpus": "used is busy GPU-equivalents (healthy GPUs' utilization summed), free the "
            "healthy rest; unhealthy GPUs are neither used nor free",
    "trend": "load and saturation over the last 15 minutes; a gap is no data, not 0",
    "liveness": "from the Proxy's heartbeats while a Proxy-side exporter reports the pool, "
                "else from the Instance exporter answering its scrapes; unregistered: "
                "the Proxy does not route to it",
    "resource": f"fresh while the host sample and its scrape are at most {FRESH_S:g} s old",
    "instance_load": "what the Proxy has in flight on it (else the engine's running + "
                     "waiting) against its capacity",
    "no_gpu_data": "no GPU series: no GPU, or its GPUs are not read",
    "held": "GPUs the Instances hold, healthy or not (all of them go with an Instance that "
            "stops); an Instance without GPU data is counted in no model",
    "unmeasured": "only an embedded Proxy measures idleness; a gateway, or no Proxy-side "
                  "exporter, says nothing of it, which is not idle",
}


@dataclass(frozen=True)
class GpuModelView:
    """Capacity of one GPU model: healthy GPUs split into used and free."""

    model: str
    healthy: int | None
    unhealthy: int | None
    memory_total_bytes: float | None
    used: float | None = None  # busy GPU-equivalents of the healthy GPUs

    @property
    def total(self) -> int | None:
        return _add(self.healthy, self.unhealthy)

    @property
    def free(self) -> float | None:
        """Healthy GPUs not busy; None when either side is unknown."""
        if self.healthy is None or self.used is None:
            return None
        return max(self.healthy - self.used, 0.0)

    def shares(self) -> tuple[float | None, float | None, float] | None:
        """Used, free and unhealthy as fractions of the total, for the bars; None
        without a total, used and free None while the use is unknown."""
        if self.healthy is None or self.unhealthy is None or self.healthy + self.unhealthy <= 0:
            return None
        total = self.healthy + self.unhealthy
        free = self.free
        if self.used is None or free is None:
            return None, None, self.unhealthy / total
        return self.used / total, free / total, self.unhealthy / total


@dataclass(frozen=True)
class TrendView:
    """One pool's last 15 minutes: a slot per `step_s` from `start`, None where no point."""

    start: float
    step_s: float
    load_ratio: tuple[float | None, ...]
    saturation: tuple[float | None, ...]

    @classmethod
    def of(cls, trends: Trends, pool: Trend) -> TrendView:
        return cls(trends.start, trends.step_s, pool.load_ratio, pool.saturation)

    @property
    def minutes(self) -> int:
        return round(self.step_s * (len(self.load_ratio) - 1) / 60)

    @property
    def end(self) -> float:
        """The newest slot's time: up to a step before the summary's."""
        return self.start + self.step_s * (len(self.load_ratio) - 1)


@dataclass(frozen=True)
class PoolView:
    """One pool's line. Ratios are 0..1 (load may exceed 1); None is unknown."""

    proxy_id: str
    load_ratio: float | None
    saturation: float | None
    instances_total: int | None
    alive: int | None
    stale: int | None
    asleep: int | None
    missing: int | None
    idle: int | None
    idle_unknown: int | None
    data_quality: str
    admission_state: str | None
    gpu_util_ratio: float | None
    gpu_memory_used_ratio: float | None
    gpus: tuple[GpuModelView, ...] | None  # None: nothing is known of the pool's GPUs
    trend: TrendView | None = None  # None: no trend was read (trend_error says why)


@dataclass(frozen=True)
class FleetView:
    generated_at: float
    stale: bool  # the bridge cannot reach Prometheus and replays its last snapshot
    age_s: float | None  # None from a bridge that does not say: unknown, not fresh
    pools: tuple[PoolView, ...]
    gpu_models: tuple[GpuModelView, ...]  # fleet totals per model, over pools that list it
    trend_error: str | None = None  # why the trends could not be read

    def age(self, digits: int = 1) -> str:
        return age_text(self.age_s, digits)

    def as_dict(self) -> dict[str, Any]:
        """The view as JSON-ready data (`--json`): the same numbers the screen shows."""
        return asdict(self)


def build_view(snapshot: BridgeSnapshot, trends: Trends | None = None,
               trend_error: str | None = None) -> FleetView:
    """The fleet; `trends` (the fleet's, or None with `trend_error`) adds each pool's."""
    by_pool: Mapping[str, Trend] = {} if trends is None else trends.pools
    pools = tuple(
        pool_view(summary, None if trends is None or pid not in by_pool
                  else TrendView.of(trends, by_pool[pid]))
        for pid, summary in sorted(snapshot.pools.items()))
    return FleetView(generated_at=snapshot.generated_at, stale=snapshot.stale,
                     age_s=snapshot.age_s, pools=pools,
                     gpu_models=_fleet_gpus(pool.gpus or () for pool in pools),
                     trend_error=trend_error)


def bridge_snapshot(served: Served) -> BridgeSnapshot:
    """The cached summaries as the client reads them (the routes round the age to the
    millisecond), so the view has one input type."""
    snap = served.snapshot
    return BridgeSnapshot(generated_at=snap.generated_at, stale=served.stale,
                          age_s=round(served.age_s, 3),
                          pools={pid: parse_pool(doc) for pid, doc in snap.pools.items()})


def pool_view(s: PoolSummary, trend: TrendView | None = None) -> PoolView:
    util = s.utilization
    return PoolView(
        proxy_id=s.proxy_id,
        load_ratio=s.load.load_ratio,
        saturation=s.load.saturation,
        instances_total=s.instances.total,
        alive=s.instances.alive,
        stale=s.instances.stale,
        asleep=s.instances.asleep,
        missing=s.instances.missing_resource,
        idle=s.instances.idle,
        idle_unknown=s.instances.idle_unknown,
        data_quality=s.health.data_quality,
        admission_state=s.health.pool_admission_state,
        gpu_util_ratio=None if util.gpu_util_avg is None else util.gpu_util_avg / PERCENT,
        gpu_memory_used_ratio=util.gpu_mem_used_ratio,
        gpus=None if s.gpus is None else tuple(
            _gpu(model, cap) for model, cap in sorted(s.gpus.items())),
        trend=trend,
    )


def _gpu(model: str, cap: GpuCapacity) -> GpuModelView:
    # The rollup has no use for a model without a healthy GPU; none of them is busy,
    # which is measured, so the fleet's sum for the model stays known.
    used = 0.0 if cap.used is None and cap.healthy == 0 else cap.used
    return GpuModelView(model, cap.healthy, cap.unhealthy, cap.memory_total_bytes, used)


def _fleet_gpus(per_pool: Iterable[Iterable[GpuModelView]]) -> tuple[GpuModelView, ...]:
    """Per-model sums; one unknown part makes the total unknown, not smaller."""
    totals: dict[str, GpuModelView] = {}
    for rows in per_pool:
        for row in rows:
            seen = totals.get(row.model)
            totals[row.model] = row if seen is None else GpuModelView(
                row.model, _add(seen.healthy, row.healthy),
                _add(seen.unhealthy, row.unhealthy),
                _add(seen.memory_total_bytes, row.memory_total_bytes),
                _add(seen.used, row.used))
    return tuple(totals[m] for m in sorted(totals))


_N = TypeVar("_N", int, float)


def _add(a: _N | None, b: _N | None) -> _N | None:
    return None if a is None or b is None else a + b


# --- formatting shared by every rendering -------------------------------------

NO_TREND = "no point of either series in the window"


def age_text(age_s: float | None, digits: int = 1) -> str:
    """'1.5s'; '?' from a bridge that does not say (unknown, not fresh)."""
    return UNKNOWN if age_s is None else f"{age_s:.{digits}f}s"


STALE_CAUSE = ("STALE: the bridge has no recent rollups (Prometheus unreachable, or its "
               "rules behind)")


def stale_banner(stale: bool, age_s: float | None) -> str | None:
    """The warning above a view served from old rollups, or None when they are recent."""
    if not stale:
        return None
    return f"{STALE_CAUSE}; these numbers are {age_text(age_s, 0)} old"

def percent(ratio: float | None) -> str:
    """'62%', or '?' for unknown (a NaN that slipped through is unknown too)."""
    if ratio is None or not math.isfinite(ratio):
        return UNKNOWN
    return f"{ratio * PERCENT:.0f}%"


def count(value: float | None) -> str:
    """A count; a fractional one (busy GPU-equivalents) to one decimal, two below 1 so
    that a little use does not read as none."""
    if value is None or not math.isfinite(value):
        return UNKNOWN
    if float(value).is_integer():
        return f"{value:.0f}"
    return f"{value:.2f}" if abs(value) < 1 else f"{value:.1f}"


def seconds(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return UNKNOWN
    return f"{value:.0f} s" if value >= 10 else f"{value:.1f} s"


def duration(value: float | None) -> str:
    """How long, in the unit a person reads it in: '45 s', '12 min', '3.5 h', '2.1 d'."""
    if value is None or not math.isfinite(value) or value < 120:
        return seconds(value)
    if value < 7200:
        return f"{value / 60:.0f} min"
    return f"{value / 3600:.1f} h" if value < 172800 else f"{value / 86400:.1f} d"


def state(value: str | None) -> str:
    return UNKNOWN if value is None else value


def gibibytes(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return UNKNOWN
    return f"{value / 2**30:,.0f} GiB"


def timestamp(unix_s: float) -> str:
    return datetime.fromtimestamp(unix_s, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def clock_time(unix_s: float) -> str:
    """'14:05:30Z': a time within the day a screen shows."""
    return datetime.fromtimestamp(unix_s, UTC).strftime("%H:%M:%SZ")


def fill(ratio: float | None) -> float | None:
    """The filled fraction of a bar, 0..1 (a load over 1 fills it); None: unknown."""
    if ratio is None or not math.isfinite(ratio):
        return None
    return min(max(ratio, 0.0), 1.0)


def level(ratio: float | None) -> str:
    """How worrying a ratio is, for colour: ok | warn | high | unknown."""
    if ratio is None or not math.isfinite(ratio):
        return "unknown"
    return "high" if ratio >= 0.9 else "warn" if ratio >= 0.7 else "ok"
