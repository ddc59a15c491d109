"""The pool summary's objects as the typed client parses them. Rendered from
contract/fields.py by `make generate` (python -m poolscope.bridge.render --write):
edit fields.py, not this file."""

from __future__ import annotations

from dataclasses import dataclass

UNKNOWN = "unknown"
MISSING = "missing"


@dataclass(frozen=True)
class MetricSource:
    """Where each group of values comes from; unknown when no rollup names it."""

    inflight: str = UNKNOWN
    qps_1m: str = UNKNOWN
    resource: str = UNKNOWN
    queue_depth: str = UNKNOWN
    instances: str = UNKNOWN


@dataclass(frozen=True)
class MetricQuality:
    """How completely each group of fields is measured."""

    resource: str = MISSING
    load: str = MISSING
    queue: str = MISSING


@dataclass(frozen=True)
class Instances:
    """The `instances` object; None: not measured, never a zero."""

    total: int | None = None
    alive: int | None = None
    stale: int | None = None
    with_resource: int | None = None
    missing_resource: int | None = None
    idle: int | None = None
    idle_unknown: int | None = None
    asleep: int | None = None


@dataclass(frozen=True)
class Load:
    """The `load` object; None: not measured, never a zero."""

    inflight_total: float | None = None
    qps_1m_total: float | None = None
    load_ratio: float | None = None
    capacity: float | None = None
    queue_pressure: float | None = None
    prepare_queue_depth: float | None = None
    ready_queue_depth: float | None = None
    saturation: float | None = None
    engine_running_total: float | None = None
    engine_waiting_total: float | None = None
    inflight_sampled_at: float | None = None


@dataclass(frozen=True)
class Utilization:
    """The `utilization` object; None: not measured, never a zero."""

    cpu_avg: float | None = None
    cpu_max: float | None = None
    memory_used_ratio: float | None = None
    gpu_util_avg: float | None = None
    gpu_util_max: float | None = None
    gpu_mem_used_ratio: float | None = None
    network_rx_mbps_total: float | None = None
    network_tx_mbps_total: float | None = None
    kv_cache_usage_avg: float | None = None
    kv_cache_usage_max: float | None = None


@dataclass(frozen=True)
class Health:
    """The `health` object; None: not measured, never a zero."""

    resource_freshness_s_avg: float | None = None
    resource_freshness_s_max: float | None = None
    pool_admission_state: str | None = None
    data_quality: str = MISSING


@dataclass(frozen=True)
class GpuCapacity:
    """One GPU model of a pool; unhealthy GPUs are neither used nor free capacity."""

    healthy: int | None = None
    unhealthy: int | None = None
    memory_total_bytes: float | None = None
    used: float | None = None
