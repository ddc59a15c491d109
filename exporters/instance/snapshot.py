"""The Resource Agent's JSON snapshot, served from the same held
samples as /metrics so the two can never disagree.

Required by the agent's consumers: schema_version, agent_version, instance_id,
timestamp_ms, devices.cpu, devices.memory, devices.network, devices.gpu
(optional), capacity_hint.memory_free_ratio, capacity_hint.admission_state.
Anything not measured is null, never 0; `devices.gpu` is null without NVML,
and a collector switched off (--no-collector.NAME) is absent from `collectors`,
one with nothing to read on this host says why in its `unavailable`.
`timestamp_ms` is when the host sample was taken (the agent's collection
time), null before the first one. Units follow the pool summary's (docs/metrics.md): CPU and GPU
utilisation in percent, ratios 0..1, network rates in megabits per second.
Fields may be added, never renamed or removed.
"""

from __future__ import annotations

import json
import math
from functools import cache
from typing import Any

from poolscope.exporters.instance.engine import EngineSample
from poolscope.exporters.instance.gpu import GpuSample
from poolscope.exporters.instance.host import HostSample
from poolscope.exporters.instance.service import InstanceExporter

SCHEMA_VERSION = "resource_snapshot_v1"


@cache
def agent_version() -> str:
    # Imported on first use: importlib.metadata drags in zipfile and csv, most
    # of a megabyte of RSS that a Prometheus-only deployment never needs.
    from importlib import metadata

    try:
        return f"poolscope-{metadata.version('poolscope')}"
    except metadata.PackageNotFoundError:
        return "poolscope-unknown"


def _percent(ratio: float | None) -> float | None:
    return None if ratio is None else ratio * 100.0


def _cpu(host: HostSample | None) -> dict[str, Any]:
    return {"utilization_percent": _percent(host.cpu_utilization) if host else None,
            "logical_count": host.cpu_count if host else None}


def _memory(host: HostSample | None) -> dict[str, Any]:
    if host is None:
        return dict.fromkeys(("total_bytes", "used_bytes", "available_bytes", "used_ratio"))
    free = host.memory_free_ratio
    return {"total_bytes": host.memory_total, "used_bytes": host.memory_used,
            "available_bytes": host.memory_available,
            "used_ratio": None if free is None else 1.0 - free}


def _network(host: HostSample | None) -> dict[str, Any]:
    if host is None:
        return {"interfaces": None, "rx_mbps": None, "tx_mbps": None}
    return {"interfaces": {name: {"rx_bytes": c.rx_bytes, "tx_bytes": c.tx_bytes}
                           for name, c in sorted(host.network.items())},
            "rx_mbps": host.network_rx_mbps, "tx_mbps": host.network_tx_mbps}


def _gpu(sample: GpuSample | None) -> list[dict[str, Any]] | None:
    if sample is None:
        return None
    return [{"index": d.identity.index, "uuid": d.identity.uuid or None,
             "model": d.identity.model or None, "healthy": d.healthy,
             "utilization_percent": _percent(d.utilization),
             "memory_used_bytes": d.memory_used, "memory_total_bytes": d.memory_total,
             "power_watts": d.power_watts, "temperature_celsius": d.temperature_celsius}
            for d in sample.devices]


def _engine(sample: EngineSample | None) -> dict[str, Any] | None:
    if sample is None:
        return None
    return {"name": sample.engine, "requests_running": sample.running,
            "requests_waiting": sample.waiting, "kv_cache_usage_ratio": sample.kv_cache_usage}


def build(exporter: InstanceExporter) -> dict[str, Any]:
    host = exporter.host.value if exporter.host else None
    gpu = exporter.gpu.value if exporter.gpu else None
    engine = exporter.engine.value if exporter.engine else None
    capacity = exporter.capacity.current()
    return {
        "schema_version": SCHEMA_VERSION,
        "agent_version": agent_version(),
        "instance_id": exporter.settings.instance_id,
        "proxy_id": exporter.settings.proxy_id,
        "timestamp_ms": round(host.wall_time * 1000) if host else None,
        "devices": {"cpu": _cpu(host), "memory": _memory(host), "network": _network(host),
                    "gpu": _gpu(gpu)},
        "engine": _engine(engine),
        "capacity_hint": {
            "memory_free_ratio": host.memory_free_ratio if host else None,
            "admission_state": exporter.admission.state(exporter.admission_inputs()).value,
            "capacity_requests": capacity[0] if capacity else None,
            "capacity_source": capacity[1] if capacity else None,
        },
        "collectors": {h.name: {"success": h.success,
                                "sample_age_s": None if h.unavailable_reason else h.age(),
                                "last_error": h.last_reason.value if h.last_reason else None,
                                "unavailable": h.unavailable_reason.value
                                if h.unavailable_reason else None}
                       for h in exporter.board},
    }


def _measured(value: Any) -> Any:
    """`value` with every NaN or infinity replaced by null: not a measurement."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _measured(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_measured(v) for v in value]
    return value


def dumps(doc: Any) -> str:
    """Strict JSON (no NaN tokens, which most parsers reject) of a snapshot document."""
    return json.dumps(_measured(doc), allow_nan=False)
