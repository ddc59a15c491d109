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

GPU usage is shown per pool (its healthy GPUs of fresh Instances, from the pool's
`utilization` rollups); per GPU model there is capacity only, because no rollup
measures usage per model and splitting the pool's ratio by model would be a guess.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from poolscope.scheduler_bridge.client import BridgeSnapshot, GpuCapacity, PoolSummary

UNKNOWN = "?"
PERCENT = 100.0
# What each column means, for the legend under the table and the page's title text.
LEGEND = {
    "unknown": "not measured, which is not 0",
    "missing": "alive, but no fresh resource data",
    "idle": "no dispatch for the idle threshold",
    "idle_unknown": "no dispatch since the Proxy started: unknown, not idle",
    "gpus": "healthy GPUs only; unhealthy GPUs are neither used nor free",
    "no_gpu_data": "no GPU series: no GPU, or its GPUs are not read",
}


@dataclass(frozen=True)
class GpuModelView:
    """Capacity of one GPU model; no usage, for want of a per-model usage rollup."""

    model: str
    healthy: int | None
    unhealthy: int | None
    memory_total_bytes: float | None


@dataclass(frozen=True)
class PoolView:
    """One pool's line. Ratios are 0..1 (load may exceed 1); None is unknown."""

    proxy_id: str
    load_ratio: float | None
    saturation: float | None
    instances_total: int | None
    alive: int | None
    stale: int | None
    missing: int | None
    idle: int | None
    idle_unknown: int | None
    data_quality: str
    admission_state: str | None
    gpu_util_ratio: float | None
    gpu_memory_used_ratio: float | None
    gpus: tuple[GpuModelView, ...] | None  # None: nothing is known of the pool's GPUs


@dataclass(frozen=True)
class FleetView:
    generated_at: float
    stale: bool  # the bridge cannot reach Prometheus and replays its last snapshot
    age_s: float | None  # None from a bridge that does not say: unknown, not fresh
    pools: tuple[PoolView, ...]
    gpu_models: tuple[GpuModelView, ...]  # fleet totals per model, over pools that list it

    def age(self, digits: int = 1) -> str:
        return "?" if self.age_s is None else f"{self.age_s:.{digits}f}s"

    def as_dict(self) -> dict[str, Any]:
        """The view as JSON-ready data (`--json`): the same numbers the screen shows."""
        return asdict(self)


def build_view(snapshot: BridgeSnapshot) -> FleetView:
    pools = tuple(_pool(summary) for _, summary in sorted(snapshot.pools.items()))
    return FleetView(generated_at=snapshot.generated_at, stale=snapshot.stale,
                     age_s=snapshot.age_s, pools=pools,
                     gpu_models=_fleet_gpus(pool.gpus or () for pool in pools))


def _pool(s: PoolSummary) -> PoolView:
    util = s.utilization
    return PoolView(
        proxy_id=s.proxy_id,
        load_ratio=s.load.load_ratio,
        saturation=s.load.saturation,
        instances_total=s.instances.total,
        alive=s.instances.alive,
        stale=s.instances.stale,
        missing=s.instances.missing_resource,
        idle=s.instances.idle,
        idle_unknown=s.instances.idle_unknown,
        data_quality=s.health.data_quality,
        admission_state=s.health.pool_admission_state,
        gpu_util_ratio=None if util.gpu_util_avg is None else util.gpu_util_avg / PERCENT,
        gpu_memory_used_ratio=util.gpu_mem_used_ratio,
        gpus=None if s.gpus is None else tuple(
            _gpu(model, cap) for model, cap in sorted(s.gpus.items())),
    )


def _gpu(model: str, cap: GpuCapacity) -> GpuModelView:
    return GpuModelView(model, cap.healthy, cap.unhealthy, cap.memory_total_bytes)


def _fleet_gpus(per_pool: Iterable[Iterable[GpuModelView]]) -> tuple[GpuModelView, ...]:
    """Per-model sums; one unknown part makes the total unknown, not smaller."""
    totals: dict[str, GpuModelView] = {}
    for rows in per_pool:
        for row in rows:
            seen = totals.get(row.model)
            totals[row.model] = row if seen is None else GpuModelView(
                row.model, _add(seen.healthy, row.healthy),
                _add(seen.unhealthy, row.unhealthy),
                _add(seen.memory_total_bytes, row.memory_total_bytes))
    return tuple(totals[m] for m in sorted(totals))


_N = TypeVar("_N", int, float)


def _add(a: _N | None, b: _N | None) -> _N | None:
    return None if a is None or b is None else a + b


# --- formatting shared by every rendering -------------------------------------

def percent(ratio: float | None) -> str:
    """'62%', or '?' for unknown (a NaN that slipped through is unknown too)."""
    if ratio is None or not math.isfinite(ratio):
        return UNKNOWN
    return f"{ratio * PERCENT:.0f}%"


def count(value: int | None) -> str:
    return UNKNOWN if value is None else str(value)


def state(value: str | None) -> str:
    return UNKNOWN if value is None else value


def gibibytes(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return UNKNOWN
    return f"{value / 2**30:,.0f} GiB"


def timestamp(unix_s: float) -> str:
    return datetime.fromtimestamp(unix_s, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


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
