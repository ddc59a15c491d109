"""Every field of the pool summary, and the rollup series it is read from.

This table is the contract between `rules/` (which must produce each rollup),
the bridges (which turn rollups into JSON), `/debug/pool_resource_sources`
and `docs/metrics.md` (a test fails when they disagree). A field is added here
or nowhere; none is ever renamed or removed (schema_version 1 is append-only).

Rollups are stored in Prometheus' base units (ratios 0..1, bytes per second);
`scale` turns them into the schema's units (percent, megabits per second).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from exporters.common import catalog


class Classification(StrEnum):
    """Seed 000's audit vocabulary: how much a field can be trusted."""

    MEASURED = "real-time measured"
    COUNTER = "runtime-maintained counter"
    DERIVED = "derived from measured data"
    CONFIGURED = "static configured"
    PLACEHOLDER = "placeholder"
    NOT_WIRED = "not wired"


class Kind(StrEnum):
    """How a rollup's value becomes a JSON value."""

    NUMBER = "number"
    COUNT = "count"  # an integer count of Instances
    STATE = "state"  # a one-hot state set: the label whose series is 1 is the value


@dataclass(frozen=True)
class Field:
    """One JSON field of the pool summary and where its value comes from."""

    path: str  # "load.inflight_total"
    rollup: str  # recording rule name, e.g. "proxy_pool:inflight_requests:sum"
    classification: Classification
    lower_layer: str  # the exporter series and module it is measured by
    null_when: str  # why the field is null, in plain words
    kind: Kind = Kind.NUMBER
    matchers: dict[str, str] = field(default_factory=dict)  # extra label selection
    scale: float = 1.0
    state_label: str = ""  # for Kind.STATE: the label that names the state
    group: str = ""  # metric_quality group: resource | load | queue | "" (none)

    @property
    def section(self) -> str:
        return self.path.split(".", 1)[0]

    @property
    def key(self) -> str:
        return self.path.split(".", 1)[1]


PERCENT = 100.0
BYTES_PER_S_TO_MBPS = 8 / 1e6

# Membership comes from the Proxy-side exporter (the embedded Proxy's registry, else a
# gateway adapter), else from the Instance exporters that declare the pool
# (self_declared); metric_source.instances names which (rules/proxy_pool.yml).
_REGISTRY = ("poolscope_proxy_pool_instances_registered (Proxy-side exporter: embedded "
             "registry or gateway adapter), else the Instance exporters declaring the pool, "
             "each remembered 5m after it stops answering (self_declared)")
_ALIVE = ("poolscope_proxy_pool_instances_alive (heartbeat on time, or ready at the gateway), "
          "else the self-declared Instance exporters answering now")
_HOST = "poolscope_collector_sample_age_seconds{collector=\"host\"} (instance exporter)"
_CPU = "poolscope_host_cpu_utilization_ratio (instance exporter, psutil)"
_MEM = "poolscope_host_memory_used_bytes / _total_bytes (instance exporter, psutil)"
# The GPU rollups read the Instance exporter's per-model aggregates of its healthy
# GPUs (the per-GPU poolscope_gpu_* series are for drill-down, not for rules).
_GPU_AVG = ("poolscope_instance_gpu_utilization_ratio_sum / "
            "poolscope_instance_gpus{health=\"healthy\"} (instance exporter, NVML: "
            "each host's healthy GPUs summed per model), weighted per GPU")
_GPU_MAX = ("poolscope_instance_gpu_utilization_ratio_max (instance exporter, NVML: "
            "the busiest healthy GPU per model on each host)")
_GPU_MEM = ("poolscope_instance_gpu_memory_used_bytes_sum / "
            "poolscope_instance_gpu_memory_total_bytes_sum (instance exporter, NVML: "
            "each host's healthy GPUs summed per model)")
_NET = "poolscope_host_network_{}_bytes_total (instance exporter, psutil), rate over 1m"
_QUEUE = ("poolscope_proxy_queue_depth{{queue=\"{}\"}} (Proxy-side exporter: the embedded "
          "Proxy's queue read live, or a gateway's)")
_NO_MEMBERS = ("no Proxy-side exporter (embedded or gateway) reports the pool and no "
               "Instance exporter declares it")
_NO_DISPATCH = ("only the embedded Proxy's dispatch path counts it: a gateway, or no "
                "Proxy-side exporter, does not")
_NO_QUEUE = ("no Proxy-side queue: not the embedded Proxy, or a gateway without one, or "
             "one that serves several pools (llmgw's admission bands with --pool-label)")
_NO_RESOURCE = "no member of the pool serves a fresh host sample"
# A rate is kept only while its 1m window has a sample within 8 s of each end
# (rules/proxy_pool.yml): after a gap rate() would extrapolate a mostly empty window.
_UNCOVERED = ("or none has a sample within 8 s of each end of the last minute (the newest "
              "not stale): for up to a minute after a gap in scrapes or a Prometheus restart")
_NO_NET = ("no member's host serves a network counter scraped now, " + _UNCOVERED)
_NO_AGE = ("no member of the pool serves a host sample age, or a member the pool counts "
           "(instances.total) serves none: its exporter is down or not scraped, a "
           "self-declared member stopped answering within 5m, or its host collector never "
           "succeeded, so its age is unknown")
_NO_GPU = "no healthy GPU in the pool (no NVML, no GPU, or every GPU failing its reads)"

FIELDS: tuple[Field, ...] = (
    # instances
    Field("instances.total", "proxy_pool:instances:count", Classification.COUNTER,
          _REGISTRY, _NO_MEMBERS, Kind.COUNT),
    Field("instances.alive", "proxy_pool:instances_alive:count", Classification.MEASURED,
          _ALIVE, _NO_MEMBERS, Kind.COUNT),
    Field("instances.stale", "proxy_pool:instances_stale:count", Classification.MEASURED,
          "members that are not alive: poolscope_proxy_pool_instances_stale, else "
          "self-declared members that stopped answering (for 5m)",
          _NO_MEMBERS + ", or its source has no per-member liveness (GIE's EPP)", Kind.COUNT),
    Field("instances.with_resource", "proxy_pool:instances_with_resource:count",
          Classification.DERIVED, _HOST + " <= 15 s: members with a fresh host sample",
          _NO_MEMBERS, Kind.COUNT),
    Field("instances.missing_resource", "proxy_pool:instances_missing_resource:count",
          Classification.DERIVED, "alive members minus those with a fresh host sample "
          "(at least 0)", _NO_MEMBERS, Kind.COUNT),
    Field("instances.idle", "proxy_pool:instances_idle:count", Classification.DERIVED,
          "poolscope_proxy_pool_instances_idle (embedded Proxy, dispatch path)", _NO_DISPATCH,
          Kind.COUNT),
    Field("instances.idle_unknown", "proxy_pool:instances_idle_unknown:count",
          Classification.DERIVED,
          "poolscope_proxy_pool_instances_idle_unknown: members with no dispatch since the "
          "Proxy started", _NO_DISPATCH, Kind.COUNT),
    # load
    Field("load.inflight_total", "proxy_pool:inflight_requests:sum", Classification.COUNTER,
          "poolscope_proxy_pool_inflight_requests (Proxy-side exporter: dispatch path or "
          "gateway), else the engines' running + waiting requests (source engine)",
          "no Proxy-side exporter reports the pool and no engine of it can be read",
          group="load"),
    Field("load.qps_1m_total", "proxy_pool:requests:rate1m", Classification.DERIVED,
          "rate(poolscope_proxy_requests_total[1m]) (Proxy-side request counter), else "
          "rate(poolscope_engine_request_success_total[1m]) (source engine)",
          "no request counter of the pool has two samples in the last minute, "
          + _UNCOVERED, group="load"),
    Field("load.load_ratio", "proxy_pool:load:ratio", Classification.DERIVED,
          "inflight_total / capacity", "inflight or capacity is unknown", group="load"),
    Field("load.capacity", "proxy_pool:capacity_requests:sum", Classification.CONFIGURED,
          "poolscope_proxy_pool_capacity_requests (configured at the Proxy, alive "
          "Instances), else poolscope_instance_capacity_requests (configured | learned)",
          "no member has a configured or learned capacity", group="load"),
    Field("load.queue_pressure", "proxy_pool:queue_pressure:ratio", Classification.DERIVED,
          "queued requests / queue capacity, prepare and ready queues together",
          "the Proxy's queues have no configured capacity", group="queue"),
    Field("load.prepare_queue_depth", "proxy_pool:queue_depth:sum", Classification.MEASURED,
          _QUEUE.format("prepare"), _NO_QUEUE, matchers={"queue": "prepare"}, group="queue"),
    Field("load.ready_queue_depth", "proxy_pool:queue_depth:sum", Classification.MEASURED,
          _QUEUE.format("ready"), _NO_QUEUE, matchers={"queue": "ready"}, group="queue"),
    Field("load.saturation", "proxy_pool:saturation:ratio", Classification.DERIVED,
          "max(queue_pressure, mean poolscope_engine_saturation_ratio: each engine's "
          "max(waiting / 5, KV-cache usage / 0.8))",
          "neither queue pressure nor engine load is known", group="load"),
    Field("load.engine_running_total", "proxy_pool:engine_requests_running:sum",
          Classification.MEASURED,
          "poolscope_engine_requests_running (instance exporter, engine /metrics)",
          "no engine of the pool can be read", group="load"),
    Field("load.engine_waiting_total", "proxy_pool:engine_requests_waiting:sum",
          Classification.MEASURED,
          "poolscope_engine_requests_waiting (instance exporter, engine /metrics)",
          "no engine of the pool can be read", group="load"),
    # utilization
    Field("utilization.cpu_avg", "proxy_pool:cpu_utilization:avg", Classification.MEASURED,
          _CPU, _NO_RESOURCE, scale=PERCENT, group="resource"),
    Field("utilization.cpu_max", "proxy_pool:cpu_utilization:max", Classification.MEASURED,
          _CPU, _NO_RESOURCE, scale=PERCENT, group="resource"),
    Field("utilization.memory_used_ratio", "proxy_pool:memory_used:ratio",
          Classification.MEASURED, _MEM, _NO_RESOURCE, group="resource"),
    Field("utilization.gpu_util_avg", "proxy_pool:gpu_utilization:avg",
          Classification.MEASURED, _GPU_AVG, _NO_GPU, scale=PERCENT, group="resource"),
    Field("utilization.gpu_util_max", "proxy_pool:gpu_utilization:max",
          Classification.MEASURED, _GPU_MAX, _NO_GPU, scale=PERCENT, group="resource"),
    Field("utilization.gpu_mem_used_ratio", "proxy_pool:gpu_memory_used:ratio",
          Classification.MEASURED, _GPU_MEM, _NO_GPU, group="resource"),
    Field("utilization.network_rx_mbps_total", "proxy_pool:network_receive_bytes:rate1m",
          Classification.DERIVED, _NET.format("receive"), _NO_NET,
          scale=BYTES_PER_S_TO_MBPS, group="resource"),
    Field("utilization.network_tx_mbps_total", "proxy_pool:network_transmit_bytes:rate1m",
          Classification.DERIVED, _NET.format("transmit"), _NO_NET,
          scale=BYTES_PER_S_TO_MBPS, group="resource"),
    Field("utilization.kv_cache_usage_avg", "proxy_pool:kv_cache_usage:avg",
          Classification.MEASURED,
          "poolscope_engine_kv_cache_usage_ratio (instance exporter, engine /metrics)",
          "no engine of the pool exposes KV-cache usage (TGI does not)", group="resource"),
    Field("utilization.kv_cache_usage_max", "proxy_pool:kv_cache_usage:max",
          Classification.MEASURED,
          "poolscope_engine_kv_cache_usage_max_ratio: the fullest data-parallel rank of any "
          "engine of the pool (instance exporter, engine /metrics)",
          "no engine of the pool exposes KV-cache usage (TGI does not)", group="resource"),
    # health
    Field("health.resource_freshness_s_avg", "proxy_pool:resource_freshness_seconds:avg",
          Classification.DERIVED, _HOST + " plus the age of the scrape", _NO_AGE),
    Field("health.resource_freshness_s_max", "proxy_pool:resource_freshness_seconds:max",
          Classification.DERIVED, "the largest " + _HOST + " plus the oldest scrape's age "
          "(errs old by at most one scrape interval, never fresh)", _NO_AGE),
    Field("health.pool_admission_state", "proxy_pool:admission_state", Classification.DERIVED,
          "poolscope_instance_admission_level (instance exporter), the best state any "
          "member offers", "no member reports an admission state",
          Kind.STATE, state_label="state"),
)

# Fields computed by the bridge from the others rather than read from a rollup.
DATA_QUALITY_PATH = "health.data_quality"
# The rules' own verdict, a one-hot state set; the bridge reports the worse of it and
# what the nulls say (never "complete" while a field is null).
DATA_QUALITY_ROLLUP = "proxy_pool:data_quality"
DATA_QUALITY_LABEL = "quality"
QUALITY_GROUPS = ("resource", "load", "queue")

# metric_source keys (seed 000) and the field whose rollup's `source` label answers.
METRIC_SOURCE_FIELDS: dict[str, str] = {
    "inflight": "load.inflight_total",
    "qps_1m": "load.qps_1m_total",
    "resource": "utilization.cpu_avg",
    "queue_depth": "load.prepare_queue_depth",
    # Added to schema_version 1: where the pool's membership comes from, one of
    # MEMBERSHIP_SOURCES (rules/proxy_pool.yml, proxy_pool:instances:count).
    "instances": "instances.total",
}
# In the rules' order of precedence (tests/rules/test_sources.py keeps them equal).
MEMBERSHIP_SOURCES = (catalog.SOURCE_PROXY_REGISTRY,
                      *(catalog.gateway_source(g) for g in catalog.GATEWAYS),
                      catalog.SOURCE_SELF_DECLARED)

SECTIONS = ("instances", "load", "utilization", "health")

# GPU capacity per GPU model (fleet status): `gpus.<gpu_model>.<key>` in the summary,
# one object per value of the rollups' GPU_MODEL_LABEL. Kept out of FIELDS because
# its keys are label values rather than a fixed set, and out of data_quality: a pool
# without GPUs is not less known for it.
#
# `gpus` is null for a pool with no series of these rollups: the rules have no series
# that tells "this pool has no GPU" from "no Instance exports GPU series" (NVML not
# wired, or the GPU collector failing), so no pool can honestly get an empty object.
GPUS_SECTION = "gpus"
GPU_MODEL_LABEL = "gpu_model"
_GPU_HEALTH = ("poolscope_instance_gpus{{health=\"{}\"}} (instance exporter, NVML: GPUs per "
               "model whose reads {} in the last sample), the pool's members; a NaN count "
               "is on neither side")
_NO_GPU_HEALTH = "the model is listed but its GPUs' health could not be read"
GPU_FIELDS: tuple[Field, ...] = (
    Field("gpus.healthy", "proxy_pool:gpus:count", Classification.DERIVED,
          _GPU_HEALTH.format("healthy", "all succeeded"), _NO_GPU_HEALTH, Kind.COUNT,
          matchers={"health": "healthy"}),
    Field("gpus.unhealthy", "proxy_pool:gpus:count", Classification.DERIVED,
          _GPU_HEALTH.format("unhealthy", "did not all succeed") + ": neither used nor free",
          _NO_GPU_HEALTH, Kind.COUNT, matchers={"health": "unhealthy"}),
    Field("gpus.memory_total_bytes", "proxy_pool:gpu_memory_total_bytes:sum",
          Classification.MEASURED,
          "poolscope_instance_gpu_memory_total_bytes_sum (instance exporter, NVML: healthy "
          "GPUs summed per model), the pool's members",
          "no GPU of the model is healthy (every one failing its reads)"),
)


def rollup_names() -> frozenset[str]:
    """Every recording rule the bridges read."""
    return frozenset({*(f.rollup for f in (*FIELDS, *GPU_FIELDS)), DATA_QUALITY_ROLLUP})
