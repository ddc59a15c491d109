"""Every field of the pool summary, and the rollup series it is read from.

This table is the contract between `rules/` (which must produce each rollup),
the bridges (which turn rollups into JSON), `/debug/pool_resource_sources`
and `docs/metrics.md` (a test fails when they disagree). The JSON Schema and the
typed client's dataclasses are rendered from it (poolscope.bridge.render), so a
field is added here, with its rule and its test, or nowhere; none is ever renamed
or removed (schema_version 1 is append-only).

Rollups are stored in Prometheus' base units (ratios 0..1, bytes per second);
`scale` turns them into the schema's units (percent, megabits per second).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from poolscope.contract import catalog
from poolscope.contract.thresholds import (
    FRESH_S,
    IDLE_S,
    KV_FULL,
    MEMBER_MEMORY,
    RATE_EDGE_S,
    RATE_WINDOW_S,
    WAITING_Q,
)


class Classification(StrEnum):
    """The audit's vocabulary (docs/metrics.md): how much a field can be trusted."""

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


class Input(StrEnum):
    """What can null a field beyond the pool's membership: the Proxy bridge looks there
    first when it explains the null (proxy_bridge/diagnosis.py has one check per input)."""

    LIVENESS = "liveness"  # the Proxy side's per-member liveness
    DISPATCH = "dispatch"  # the embedded Proxy's dispatch path
    TRAFFIC = "traffic"  # a request counter with a covered rate window
    CAPACITY = "capacity"  # a configured or learned capacity per alive member
    QUEUE_CAPACITY = "queue_capacity"  # the Proxy's configured queue capacity
    QUEUE = "queue"  # the Proxy's queue named by the field's `queue` matcher
    ENGINE = "engine"  # each alive member's engine /metrics
    KV_CACHE = "kv_cache"  # an engine that exposes KV-cache usage
    HOST = "host"  # each member's fresh host sample
    GPU = "gpu"  # each member's healthy GPUs
    NETWORK = "network"  # host network counters with a covered rate window
    FRESHNESS = "freshness"  # a host sample age for every member the pool counts
    ADMISSION = "admission"  # an alive member's exporter, which states its admission


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
    inputs: tuple[Input, ...] = ()  # none: its rollup alone can explain a null
    # Only a Proxy-side exporter measures it, so a silent one explains its null.
    proxy_side: bool = False

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
             f"each remembered {MEMBER_MEMORY} after it stops answering (self_declared)")
_ALIVE = ("poolscope_proxy_pool_instances_alive (heartbeat on time, or ready at the gateway), "
          "else the self-declared Instance exporters answering now")
_HOST = "poolscope_collector_sample_age_seconds{collector=\"host\"} (instance exporter)"
_CPU = "poolscope_host_cpu_utilization_ratio (instance exporter, psutil)"
_MEM = "poolscope_host_memory_used_bytes / _total_bytes (instance exporter, psutil)"
# The GPU rollups read the Instance exporter's per-model aggregates of its healthy
# GPUs (the per-GPU poolscope_gpu_* series are for drill-down, not for rules).
_GPU_AVG = ("poolscope_instance_gpu_utilization_sum_ratio / "
            "poolscope_instance_gpus{health=\"healthy\"} (instance exporter, NVML: "
            "each host's healthy GPUs summed per model), weighted per GPU, over the models "
            "whose use is measured (gpus.used)")
_GPU_MAX = ("poolscope_instance_gpu_utilization_max_ratio (instance exporter, NVML: "
            "the busiest healthy GPU per model on each host)")
_GPU_MEM = ("poolscope_instance_gpu_memory_used_bytes / "
            "poolscope_instance_gpu_memory_total_bytes (instance exporter, NVML: "
            "each host's healthy GPUs summed per model)")
_NET = ("poolscope_host_network_{}_bytes_per_second (instance exporter, psutil): each "
        "host's rate over its exporter's own last minute of samples")
_QUEUE = ("poolscope_proxy_queue_depth{{queue=\"{}\"}} (Proxy-side exporter: the embedded "
          "Proxy's queue read live, or a gateway's)")
_NO_MEMBERS = ("no Proxy-side exporter (embedded or gateway) reports the pool and no "
               "Instance exporter declares it")
_NO_DISPATCH = ("only the embedded Proxy's dispatch path counts it: a gateway, or no "
                "Proxy-side exporter, does not")
_NO_QUEUE = ("no Proxy-side queue: not the embedded Proxy, or a gateway without one, or "
             "one that serves several pools (llmgw's admission bands with --pool-label)")
_NO_RESOURCE = "no member of the pool serves a fresh host sample"
# A rate is kept only while its 1m window has a sample within RATE_EDGE_S of each end
# (rules/proxy_pool.yml): after a gap rate() would extrapolate a mostly empty window.
_UNCOVERED = (f"or none has a sample within {RATE_EDGE_S:g} s of each end of the last minute "
              "(the newest not stale): for up to a minute after a gap in scrapes or a "
              "Prometheus restart")
# A rate an exporter states once its own samples cover the window (window_rate.py).
_STATED_AFTER = (f"an exporter states one once its own samples span "
                 f"{RATE_WINDOW_S - RATE_EDGE_S:g} s: after it starts, after its counter "
                 "resets, after a gap in its samples")
_NO_NET = ("no member's exporter states a network rate now (" + _STATED_AFTER
           + ", after its interfaces change)")
_NO_AGE = ("no member of the pool serves a host sample age, or a member the pool counts "
           "(instances.total) serves none: its exporter is down or not scraped, a "
           f"self-declared member stopped answering within {MEMBER_MEMORY}, or its host "
           "collector never succeeded, so its age is unknown")
_NO_GPU = "no healthy GPU in the pool (no NVML, no GPU, or every GPU failing its reads)"

FIELDS: tuple[Field, ...] = (
    # instances
    Field("instances.total", "proxy_pool:instances:count", Classification.COUNTER,
          _REGISTRY, _NO_MEMBERS, Kind.COUNT),
    Field("instances.alive", "proxy_pool:instances_alive:count", Classification.MEASURED,
          _ALIVE, _NO_MEMBERS, Kind.COUNT),
    Field("instances.stale", "proxy_pool:instances_stale:count", Classification.MEASURED,
          "members that are not alive: poolscope_proxy_pool_instances_stale, else "
          f"self-declared members that stopped answering (for {MEMBER_MEMORY})",
          _NO_MEMBERS + ", or its source has no per-member liveness (GIE's EPP)", Kind.COUNT,
          inputs=(Input.LIVENESS,), proxy_side=True),
    Field("instances.with_resource", "proxy_pool:instances_with_resource:count",
          Classification.DERIVED, _HOST + f" <= {FRESH_S:g} s: members with a fresh host sample, "
          "but for those poolscope_proxy_instance_alive holds stale", _NO_MEMBERS, Kind.COUNT),
    Field("instances.missing_resource", "proxy_pool:instances_missing_resource:count",
          Classification.DERIVED, "alive members minus those with a fresh host sample "
          "(at least 0)", _NO_MEMBERS, Kind.COUNT),
    Field("instances.idle", "proxy_pool:instances_idle:count", Classification.DERIVED,
          f"poolscope_proxy_pool_instances_idle: members with no dispatch for over {IDLE_S:g} s "
          "(embedded Proxy, dispatch path)", _NO_DISPATCH, Kind.COUNT,
          inputs=(Input.DISPATCH,), proxy_side=True),
    Field("instances.idle_unknown", "proxy_pool:instances_idle_unknown:count",
          Classification.DERIVED,
          "poolscope_proxy_pool_instances_idle_unknown: members with no dispatch since the "
          "Proxy started", _NO_DISPATCH, Kind.COUNT, inputs=(Input.DISPATCH,), proxy_side=True),
    # Appended to schema_version 1, last of `instances`: members that answer with zeros but
    # serve nothing until woken, so neither their capacity nor their idleness is free.
    Field("instances.asleep", "proxy_pool:instances_asleep:count", Classification.DERIVED,
          "poolscope_instance_admission_level == 2 (instance exporter): members whose engine "
          "says it is asleep (vLLM's sleep mode, vllm:engine_sleep_state); 0 for engines that "
          "state no sleep", _NO_MEMBERS, Kind.COUNT),
    # load
    Field("load.inflight_total", "proxy_pool:inflight_requests:sum", Classification.COUNTER,
          "poolscope_proxy_pool_inflight_requests (Proxy-side exporter: dispatch path or "
          "gateway), else the engines' running + waiting requests (source engine)",
          "no Proxy-side exporter reports the pool and no engine of it can be read",
          group="load"),
    Field("load.qps_1m_total", "proxy_pool:requests:rate1m", Classification.DERIVED,
          "rate(poolscope_proxy_requests_total[1m]) (Proxy-side request counter), else "
          "poolscope_engine_request_success_per_second (each engine's rate over its "
          "exporter's own last minute, source engine)",
          "no Proxy-side request counter of the pool has two samples in the last minute, "
          + _UNCOVERED + "; without a Proxy-side exporter, no engine of the pool has a "
          "success rate stated (" + _STATED_AFTER + ", after the engine restarts)",
          group="load", inputs=(Input.TRAFFIC,)),
    Field("load.load_ratio", "proxy_pool:load:ratio", Classification.DERIVED,
          "inflight_total / capacity", "inflight or capacity is unknown", group="load",
          inputs=(Input.CAPACITY,)),
    Field("load.capacity", "proxy_pool:capacity_requests:sum", Classification.CONFIGURED,
          "poolscope_proxy_pool_capacity_requests (configured at the Proxy, alive "
          "Instances), else poolscope_instance_capacity_requests (configured | learned)",
          "no member has a configured or learned capacity", group="load",
          inputs=(Input.CAPACITY,)),
    Field("load.queue_pressure", "proxy_pool:queue_pressure:ratio", Classification.DERIVED,
          "queued requests / queue capacity, prepare and ready queues together",
          "the Proxy's queues have no configured capacity", group="queue",
          inputs=(Input.QUEUE_CAPACITY,), proxy_side=True),
    Field("load.prepare_queue_depth", "proxy_pool:queue_depth:sum", Classification.MEASURED,
          _QUEUE.format("prepare"), _NO_QUEUE, matchers={"queue": "prepare"}, group="queue",
          inputs=(Input.QUEUE,), proxy_side=True),
    Field("load.ready_queue_depth", "proxy_pool:queue_depth:sum", Classification.MEASURED,
          _QUEUE.format("ready"), _NO_QUEUE, matchers={"queue": "ready"}, group="queue",
          inputs=(Input.QUEUE,), proxy_side=True),
    Field("load.saturation", "proxy_pool:saturation:ratio", Classification.DERIVED,
          "max(queue_pressure, mean poolscope_engine_saturation_ratio: each engine's "
          f"max(waiting / {WAITING_Q:g}, KV-cache usage / {KV_FULL:g}))",
          "neither queue pressure nor engine load is known", group="load",
          inputs=(Input.QUEUE_CAPACITY, Input.ENGINE)),
    Field("load.engine_running_total", "proxy_pool:engine_requests_running:sum",
          Classification.MEASURED,
          "poolscope_engine_requests_running (instance exporter, engine /metrics)",
          "no engine of the pool can be read", group="load", inputs=(Input.ENGINE,)),
    Field("load.engine_waiting_total", "proxy_pool:engine_requests_waiting:sum",
          Classification.MEASURED,
          "poolscope_engine_requests_waiting (instance exporter, engine /metrics)",
          "no engine of the pool can be read", group="load", inputs=(Input.ENGINE,)),
    # Appended to schema_version 1, last of `load` (Load takes its fields in this order):
    # when inflight_total was measured, so a Scheduler can correct it for its own requests
    # dispatched since. A timestamp of a load field, not a load measurement, so in no
    # quality group; it exists exactly when inflight_total does (the rule's `and`).
    Field("load.inflight_sampled_at", "proxy_pool:inflight_requests:timestamp",
          Classification.MEASURED,
          "Prometheus' scrape timestamp (unix seconds) of poolscope_proxy_pool_inflight_requests "
          "(the Proxy-side count: dispatch path or gateway), else the oldest of the engines' "
          "poolscope_engine_requests_running scrapes (source engine); a gateway's and the "
          "engines' readings are sampled in the background, so may be older by their "
          "collector's sample age",
          "load.inflight_total is null"),
    # utilization
    Field("utilization.cpu_avg", "proxy_pool:cpu_utilization:avg", Classification.MEASURED,
          _CPU, _NO_RESOURCE, scale=PERCENT, group="resource", inputs=(Input.HOST,)),
    Field("utilization.cpu_max", "proxy_pool:cpu_utilization:max", Classification.MEASURED,
          _CPU, _NO_RESOURCE, scale=PERCENT, group="resource", inputs=(Input.HOST,)),
    Field("utilization.memory_used_ratio", "proxy_pool:memory_used:ratio",
          Classification.MEASURED, _MEM, _NO_RESOURCE, group="resource",
          inputs=(Input.HOST,)),
    Field("utilization.gpu_util_avg", "proxy_pool:gpu_utilization:avg",
          Classification.MEASURED, _GPU_AVG, _NO_GPU, scale=PERCENT, group="resource",
          inputs=(Input.GPU,)),
    Field("utilization.gpu_util_max", "proxy_pool:gpu_utilization:max",
          Classification.MEASURED, _GPU_MAX, _NO_GPU, scale=PERCENT, group="resource",
          inputs=(Input.GPU,)),
    Field("utilization.gpu_mem_used_ratio", "proxy_pool:gpu_memory_used:ratio",
          Classification.MEASURED, _GPU_MEM, _NO_GPU, group="resource", inputs=(Input.GPU,)),
    Field("utilization.network_rx_mbps_total", "proxy_pool:network_receive_bytes:rate1m",
          Classification.DERIVED, _NET.format("receive"), _NO_NET,
          scale=BYTES_PER_S_TO_MBPS, group="resource", inputs=(Input.NETWORK,)),
    Field("utilization.network_tx_mbps_total", "proxy_pool:network_transmit_bytes:rate1m",
          Classification.DERIVED, _NET.format("transmit"), _NO_NET,
          scale=BYTES_PER_S_TO_MBPS, group="resource", inputs=(Input.NETWORK,)),
    Field("utilization.kv_cache_usage_avg", "proxy_pool:kv_cache_usage:avg",
          Classification.MEASURED,
          "poolscope_engine_kv_cache_usage_ratio (instance exporter, engine /metrics)",
          "no engine of the pool exposes KV-cache usage (TGI does not)", group="resource",
          inputs=(Input.KV_CACHE,)),
    Field("utilization.kv_cache_usage_max", "proxy_pool:kv_cache_usage:max",
          Classification.MEASURED,
          "poolscope_engine_kv_cache_usage_max_ratio: the fullest data-parallel rank of any "
          "engine of the pool (instance exporter, engine /metrics)",
          "no engine of the pool exposes KV-cache usage (TGI does not)", group="resource",
          inputs=(Input.KV_CACHE,)),
    # health
    Field("health.resource_freshness_s_avg", "proxy_pool:resource_freshness_seconds:avg",
          Classification.DERIVED, _HOST + " plus the age of the scrape", _NO_AGE,
          inputs=(Input.FRESHNESS,)),
    Field("health.resource_freshness_s_max", "proxy_pool:resource_freshness_seconds:max",
          Classification.DERIVED, "the largest " + _HOST + " plus the oldest scrape's age "
          "(errs old by at most one scrape interval, never fresh)", _NO_AGE,
          inputs=(Input.FRESHNESS,)),
    Field("health.pool_admission_state", "proxy_pool:admission_state", Classification.DERIVED,
          "poolscope_instance_admission_level (instance exporter), the best state any "
          "member offers", "no member reports an admission state",
          Kind.STATE, state_label="state", inputs=(Input.ADMISSION,)),
)

# Fields computed by the bridge from the others rather than read from a rollup.
DATA_QUALITY_PATH = "health.data_quality"
# The rules' own verdict, a one-hot state set; the bridge reports the worse of it and
# what the nulls say (never "complete" while a field is null).
DATA_QUALITY_ROLLUP = "proxy_pool:data_quality"
DATA_QUALITY_LABEL = "quality"
QUALITY_GROUPS = ("resource", "load", "queue")
# The verdicts data_quality and each metric_quality group take, best first.
QUALITY_LEVELS = ("complete", "partial", "missing")

# metric_source keys and the field whose rollup's `source` label answers.
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
# The exporter sums a model's healthy GPUs only, so a model whose GPUs all fail has no sums.
_NO_HEALTHY_GPU = "no GPU of the model is healthy (every one failing its reads)"
GPU_FIELDS: tuple[Field, ...] = (
    Field("gpus.healthy", "proxy_pool:gpus:count", Classification.DERIVED,
          _GPU_HEALTH.format("healthy", "all succeeded"), _NO_GPU_HEALTH, Kind.COUNT,
          matchers={"health": "healthy"}),
    Field("gpus.unhealthy", "proxy_pool:gpus:count", Classification.DERIVED,
          _GPU_HEALTH.format("unhealthy", "did not all succeed") + ": neither used nor free",
          _NO_GPU_HEALTH, Kind.COUNT, matchers={"health": "unhealthy"}),
    Field("gpus.memory_total_bytes", "proxy_pool:gpu_memory_total_bytes:sum",
          Classification.MEASURED,
          "poolscope_instance_gpu_memory_total_bytes (instance exporter, NVML: healthy "
          "GPUs summed per model), the pool's members", _NO_HEALTHY_GPU),
    # Last: GpuCapacity takes its fields in this order, and fields are only ever appended.
    Field("gpus.used", "proxy_pool:gpu_utilization:sum", Classification.DERIVED,
          "poolscope_instance_gpu_utilization_sum_ratio (instance exporter, NVML: healthy "
          "GPUs summed per model), the pool's members: busy GPU-equivalents, the healthy "
          "GPUs' utilization summed; free = healthy - used", _NO_HEALTHY_GPU
          + ", or a member's healthy GPUs of the model have no utilization reading"),
)


def rollup_names() -> frozenset[str]:
    """Every recording rule the bridges read."""
    return frozenset({*(f.rollup for f in (*FIELDS, *GPU_FIELDS)), DATA_QUALITY_ROLLUP})
