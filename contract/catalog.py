"""The one list of every series Poolscope's exporters publish.

Names, types, help and labels live here and nowhere else: the Instance and
Proxy exporters, the fleet simulator, the recording rules' tests and
`docs/metrics.md` all read them from this module, so a rename cannot drift
between producer and consumer.

Every family carries `source` (docs/design.md: every series names its source) and
the identity labels of its level: `proxy_id` always, `instance_id` where the
series is about one Instance.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

Kind = Literal["gauge", "counter", "histogram"]

INSTANCE_LABELS: tuple[str, ...] = ("proxy_id", "instance_id", "source")
PROXY_LABELS: tuple[str, ...] = ("proxy_id", "source")


@dataclass(frozen=True)
class Family:
    """A metric family's contract: its name, type, meaning and label names."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...]

    def new(self) -> Metric:
        """An empty client_python family, filled at scrape time by a collector."""
        labels = list(self.labels)
        if self.kind == "gauge":
            return GaugeMetricFamily(self.name, self.help, labels=labels)
        if self.kind == "counter":
            # client_python appends `_total` itself; hand it the base name.
            return CounterMetricFamily(self.name.removesuffix("_total"), self.help, labels=labels)
        return HistogramMetricFamily(self.name, self.help, labels=labels)


def _instance(name: str, kind: Kind, help_: str, *extra: str) -> Family:
    return Family(name, kind, help_, (*INSTANCE_LABELS, *extra))


def _proxy(name: str, kind: Kind, help_: str, *extra: str) -> Family:
    return Family(name, kind, help_, (*PROXY_LABELS, *extra))


# --- Instance exporter: host (source="psutil") -------------------------------
HOST_CPU_UTILIZATION = _instance(
    "poolscope_host_cpu_utilization_ratio", "gauge",
    "Host CPU busy time over the last sample interval, 0..1 across all cores.")
HOST_CPU_COUNT = _instance(
    "poolscope_host_cpus", "gauge", "Logical CPUs on the host.")
HOST_MEMORY_TOTAL = _instance(
    "poolscope_host_memory_total_bytes", "gauge", "Physical memory on the host.")
HOST_MEMORY_USED = _instance(
    "poolscope_host_memory_used_bytes", "gauge",
    "Physical memory in use: total minus available.")
HOST_MEMORY_AVAILABLE = _instance(
    "poolscope_host_memory_available_bytes", "gauge",
    "Memory that can be given to processes without swapping.")
HOST_NETWORK_RECEIVE = _instance(
    "poolscope_host_network_receive_bytes_total", "counter",
    "Bytes received per interface, loopback excluded.", "device")
HOST_NETWORK_TRANSMIT = _instance(
    "poolscope_host_network_transmit_bytes_total", "counter",
    "Bytes transmitted per interface, loopback excluded.", "device")
# The exporter's own rates of the counters above (exporters/common/window_rate.py):
# what the pool rules read, one series per Instance instead of each counter three times.
def _window_rate(what: str, restart: str) -> str:
    return (f"{what} per second over the exporter's own samples of the last 60 s "
            "(RATE_WINDOW_S); absent until they span 52 s (RATE_WINDOW_S - RATE_EDGE_S), "
            f"after start-up or {restart}; never extrapolated.")


HOST_NETWORK_RECEIVE_RATE = _instance(
    "poolscope_host_network_receive_bytes_per_second", "gauge", _window_rate(
        "Bytes received, loopback excluded, all interfaces together,",
        "a counter reset or a change of interfaces"))
HOST_NETWORK_TRANSMIT_RATE = _instance(
    "poolscope_host_network_transmit_bytes_per_second", "gauge", _window_rate(
        "Bytes transmitted, loopback excluded, all interfaces together,",
        "a counter reset or a change of interfaces"))

# --- Instance exporter: GPUs (source="nvml") ---------------------------------
GPU_LABELS = ("gpu", "gpu_uuid", "gpu_model")
GPU_DEVICES = _instance(
    "poolscope_gpu_devices", "gauge",
    "GPUs NVML reports on the host; absent when NVML cannot be initialised (without "
    "an NVIDIA driver, poolscope_collector_unavailable_info says so).")
GPU_HEALTHY = _instance(
    "poolscope_gpu_healthy", "gauge",
    "1 when every read of this GPU succeeded in the last sample, 0 when one failed "
    "(its usage series are then absent: unhealthy is neither used nor free).", *GPU_LABELS)
GPU_UTILIZATION = _instance(
    "poolscope_gpu_utilization_ratio", "gauge",
    "Fraction of the last sample period the GPU was busy, 0..1.", *GPU_LABELS)
GPU_MEMORY_USED = _instance(
    "poolscope_gpu_memory_used_bytes", "gauge", "GPU framebuffer memory in use.", *GPU_LABELS)
GPU_MEMORY_TOTAL = _instance(
    "poolscope_gpu_memory_total_bytes", "gauge", "GPU framebuffer memory in all.", *GPU_LABELS)
GPU_POWER = _instance(
    "poolscope_gpu_power_watts", "gauge", "GPU power draw.", *GPU_LABELS)
GPU_TEMPERATURE = _instance(
    "poolscope_gpu_temperature_celsius", "gauge", "GPU core temperature.", *GPU_LABELS)

# Per-Instance aggregates of the GPUs above, one set per GPU model on the host:
# what the pool rules read, so a rule reads one series per Instance and model
# instead of one per GPU (rules cost what they read: docs/design.md). The
# per-GPU series stay for drill-down. Absent with the per-GPU series (no NVML,
# no GPU); the sums and max are absent too for a model with no healthy GPU,
# since an unhealthy GPU is neither used nor free.
GPU_HEALTH = ("healthy", "unhealthy")
INSTANCE_GPUS = _instance(
    "poolscope_instance_gpus", "gauge",
    "GPUs of this model on the host, by health: healthy when every read of the GPU "
    "succeeded in the last sample (as poolscope_gpu_healthy), else unhealthy; both "
    "values are published for every model present.", "gpu_model", "health")
# Each name ends in its unit, and none in `_sum`, `_count` or `_bucket` (a histogram's
# or summary's, which promtool's lint refuses on a gauge); the per-GPU names are
# `poolscope_gpu_*`, so `poolscope_instance_gpu_memory_used_bytes` clashes with none.
INSTANCE_GPU_UTILIZATION_SUM = _instance(
    "poolscope_instance_gpu_utilization_sum_ratio", "gauge",
    "Sum of poolscope_gpu_utilization_ratio over the healthy GPUs of this model; "
    "divided by poolscope_instance_gpus{health=\"healthy\"} it is their mean.", "gpu_model")
INSTANCE_GPU_UTILIZATION_MAX = _instance(
    "poolscope_instance_gpu_utilization_max_ratio", "gauge",
    "The busiest healthy GPU of this model: max of poolscope_gpu_utilization_ratio.",
    "gpu_model")
INSTANCE_GPU_MEMORY_USED_SUM = _instance(
    "poolscope_instance_gpu_memory_used_bytes", "gauge",
    "Framebuffer memory in use, summed over the healthy GPUs of this model.", "gpu_model")
INSTANCE_GPU_MEMORY_TOTAL_SUM = _instance(
    "poolscope_instance_gpu_memory_total_bytes", "gauge",
    "Framebuffer memory in all, summed over the healthy GPUs of this model.", "gpu_model")

# --- Instance exporter: engine (source="engine:<name>", one of ENGINES) ---------
ENGINE_REQUESTS_RUNNING = _instance(
    "poolscope_engine_requests_running", "gauge",
    "Requests the engine is executing (in its running batch), summed over its "
    "data-parallel ranks.")
ENGINE_REQUESTS_WAITING = _instance(
    "poolscope_engine_requests_waiting", "gauge",
    "Requests queued inside the engine, summed over its data-parallel ranks.")
ENGINE_KV_CACHE_USAGE = _instance(
    "poolscope_engine_kv_cache_usage_ratio", "gauge",
    "KV-cache blocks in use, 0..1, averaged over data-parallel ranks; absent for "
    "engines that do not expose it (TGI, llama.cpp since 2025).")
ENGINE_KV_CACHE_USAGE_MAX = _instance(
    "poolscope_engine_kv_cache_usage_max_ratio", "gauge",
    "KV-cache usage, 0..1, of the fullest data-parallel rank (the mean hides one full "
    "rank); what the engine's saturation and admission read.")
ENGINE_SATURATION = _instance(
    "poolscope_engine_saturation_ratio", "gauge",
    "The engine's load against its healthy limit (1): max(waiting requests / WAITING_Q, "
    "fullest rank's KV-cache usage / KV_FULL), thresholds in "
    "contract/thresholds.py; one term when the engine exposes only one. What "
    "the pool's saturation averages.")
ENGINE_REQUEST_SUCCESS = _instance(
    "poolscope_engine_request_success_total", "counter",
    "Requests the engine finished successfully (its own counter).")
ENGINE_REQUEST_SUCCESS_RATE = _instance(
    "poolscope_engine_request_success_per_second", "gauge", _window_rate(
        "Requests the engine finished successfully", "an engine restart"))
ENGINE_PROMPT_TOKENS = _instance(
    "poolscope_engine_prompt_tokens_total", "counter", "Prompt tokens the engine processed.")
ENGINE_GENERATION_TOKENS = _instance(
    "poolscope_engine_generation_tokens_total", "counter",
    "Tokens the engine generated.")

# --- Instance exporter: capacity and admission --------------------------------
INSTANCE_CAPACITY = _instance(
    "poolscope_instance_capacity_requests", "gauge",
    "Concurrent requests this Instance can run: source=configured (--capacity), "
    "source=engine:<name> (the engine's own limit: llama.cpp's slots, TensorRT-LLM's "
    "max batch) or source=learned (the most requests seen running at once in the last "
    "hour); "
    "absent while the engine it reads does not answer, and while it is asleep (admission "
    "state asleep: it offers no capacity until woken).")
ADMISSION_STATES = ("accepting", "degraded", "saturated", "asleep", "draining", "unknown")
INSTANCE_ADMISSION_STATE = _instance(
    "poolscope_instance_admission_state", "gauge",
    "1 for the Instance's current admission state, 0 for the others (a state set). Its "
    "thresholds (ADMISSION_* in contract/thresholds.py) differ from the "
    "saturation's WAITING_Q and KV_FULL on purpose: saturation is a score to compare "
    "Instances by, 1 where the Gateway API Inference Extension stops preferring one, "
    "while admission is the Instance's own verdict, degraded once a request waits and "
    "saturated only near the engine's limits. asleep: the engine says it is asleep (vLLM's "
    "sleep mode), so it answers with zeros but serves nothing until woken.",
    "state")
# The same state as one number, so a pool rule reads one series per Instance
# (`max` is the best state any member offers) instead of five plus a join.
# An asleep engine ranks above draining: it can be woken, a draining one is leaving.
ADMISSION_LEVELS: dict[str, int] = {
    "accepting": 5, "degraded": 4, "saturated": 3, "asleep": 2, "draining": 1, "unknown": 0}
INSTANCE_ADMISSION_LEVEL = _instance(
    "poolscope_instance_admission_level", "gauge",
    "The admission state as a number, higher admits more: 5 accepting, 4 degraded, "
    "3 saturated, 2 asleep, 1 draining, 0 unknown.")

# --- Every exporter: collector health (node_exporter's pattern) ---------------
# Per Instance exporter; the Proxy exporter has its own pair further down, since
# its collectors belong to the Proxy, not to one Instance.
COLLECTOR_SUCCESS = _instance(
    "poolscope_collector_success", "gauge",
    "1 when the collector's last sample succeeded, 0 when it failed.", "collector")
COLLECTOR_LAST_SUCCESS = _instance(
    "poolscope_collector_last_success_timestamp_seconds", "gauge",
    "Wall-clock time of the collector's last successful sample (for people; rules "
    "use the age below, which no host clock skew can fake).", "collector")
COLLECTOR_SAMPLE_AGE = _instance(
    "poolscope_collector_sample_age_seconds", "gauge",
    "Seconds since the collector's last successful sample, measured on a monotonic "
    "clock at scrape time; absent before the first success.", "collector")
COLLECTOR_DURATION = _instance(
    "poolscope_collector_duration_seconds", "gauge",
    "How long the collector's last sample took.", "collector")
COLLECTOR_ERRORS = _instance(
    "poolscope_collector_errors_total", "counter",
    "Failed samples by collector and reason.", "collector", "reason")
# A collector with nothing to read on this host (a GPU-less host has no NVIDIA driver)
# is in a state, not failing: node_exporter's model. It then publishes this series
# alone, in place of its usage and health series; `reason` is one of
# UNAVAILABLE_REASONS (poolscope.exporters.common.health.UnavailableReason).
UNAVAILABLE_REASONS = ("no_nvml_library", "driver_not_loaded")
COLLECTOR_UNAVAILABLE = _instance(
    "poolscope_collector_unavailable_info", "gauge",
    "1 while the collector has nothing to read on this host, by reason "
    "(no_nvml_library: NVIDIA's libnvidia-ml.so.1 is not installed; driver_not_loaded: "
    "it is, but NVML finds no loaded kernel driver): a state, not a failure. The "
    "collector's usage and health series are then absent, none reads 0.",
    "collector", "reason")

# --- Proxy exporter: per Instance in the pool ---------------------------------
PROXY_INSTANCE_REGISTERED = _instance(
    "poolscope_proxy_instance_registered", "gauge",
    "1 for every Instance registered with the Proxy (source=proxy_registry); the "
    "series leaves with the Instance.")
PROXY_INSTANCE_ALIVE = _instance(
    "poolscope_proxy_instance_alive", "gauge",
    "1 when the Instance heartbeat arrived within the Proxy's timeout, else 0.")
PROXY_INSTANCE_HEARTBEAT_AGE = _instance(
    "poolscope_proxy_instance_heartbeat_age_seconds", "gauge",
    "Seconds since the Instance's last heartbeat, monotonic clock at scrape time.")
PROXY_INSTANCE_CAPACITY = _instance(
    "poolscope_proxy_instance_capacity_requests", "gauge",
    "Concurrent requests the Proxy is configured to send the Instance "
    "(source=configured); absent when not configured.")
PROXY_INSTANCE_INFLIGHT = _instance(
    "poolscope_proxy_instance_inflight_requests", "gauge",
    "Requests the Proxy dispatched to the Instance that have not completed, failed "
    "or been cancelled (source=proxy_dispatch).")
PROXY_INSTANCE_REQUESTS = _instance(
    "poolscope_proxy_instance_requests_total", "counter",
    "Requests the Proxy dispatched to the Instance, by outcome "
    "(ok | error | timeout | rejected | cancelled).", "outcome")
PROXY_INSTANCE_REQUEST_DURATION = _instance(
    "poolscope_proxy_instance_request_duration_seconds", "histogram",
    "Time from dispatch to the Instance until the request completed.")
PROXY_INSTANCE_LAST_DISPATCH = _instance(
    "poolscope_proxy_instance_last_dispatch_timestamp_seconds", "gauge",
    "Wall-clock time a request was last dispatched to the Instance; absent before "
    "the first dispatch (unknown, not idle).")
PROXY_INSTANCE_IDLE = _instance(
    "poolscope_proxy_instance_idle_seconds", "gauge",
    "Seconds since a request was last dispatched to the Instance, monotonic clock at "
    "scrape time; absent before the first dispatch (unknown, not idle).")

# --- Proxy exporter: the Proxy itself ----------------------------------------
QUEUES = ("prepare", "ready")
PROXY_QUEUE_DEPTH = _proxy(
    "poolscope_proxy_queue_depth", "gauge",
    "Requests waiting in the Proxy's queue, read live at scrape time.", "queue")
PROXY_QUEUE_CAPACITY = _proxy(
    "poolscope_proxy_queue_capacity", "gauge",
    "Configured bound of the Proxy's queue (source=configured); absent when unbounded.",
    "queue")
PROXY_QUEUE_WAIT = _proxy(
    "poolscope_proxy_queue_wait_seconds", "histogram",
    "Time a request spent in the queue before leaving it (any way).", "queue")
PROXY_QUEUE_OLDEST_AGE = _proxy(
    "poolscope_proxy_queue_oldest_age_seconds", "gauge",
    "Age of the oldest request now in the queue; absent when the queue is empty.",
    "queue")
PROXY_QUEUE_REJECTIONS = _proxy(
    "poolscope_proxy_queue_rejections_total", "counter",
    "Requests the queue turned away, by reason (full | timeout).", "queue", "reason")
PROXY_REQUESTS = _proxy(
    "poolscope_proxy_requests_total", "counter",
    "Requests the Proxy accepted, by final outcome "
    "(ok | error | timeout | rejected | cancelled).", "outcome")
# Per-pool counts the Proxy-side exporter already knows at scrape time (embedded:
# its registry; gateway: what the gateway's page says), so the pool rules sum one
# series per pool instead of joining per-Instance ones. `source` names the
# membership source: proxy_registry, or gateway:<name>. A count the source does
# not measure is absent, never 0 (a gateway without per-endpoint liveness has no
# stale count).
POOL_INSTANCES_REGISTERED = _proxy(
    "poolscope_proxy_pool_instances_registered", "gauge",
    "Instances in the pool, alive or not.")
POOL_INSTANCES_ALIVE = _proxy(
    "poolscope_proxy_pool_instances_alive", "gauge",
    "Instances of the pool that are alive (embedded: heartbeat on time; gateway: as "
    "the gateway reports readiness).")
POOL_INSTANCES_STALE = _proxy(
    "poolscope_proxy_pool_instances_stale", "gauge",
    "Instances of the pool that are registered but not alive.")
POOL_INSTANCES_IDLE = _proxy(
    "poolscope_proxy_pool_instances_idle", "gauge",
    "Instances not dispatched to for the idle threshold (poolscope.contract.thresholds).")
POOL_INSTANCES_IDLE_UNKNOWN = _proxy(
    "poolscope_proxy_pool_instances_idle_unknown", "gauge",
    "Instances never dispatched to since the exporter started: idle time unknown.")
POOL_INFLIGHT = _proxy(
    "poolscope_proxy_pool_inflight_requests", "gauge",
    "Requests dispatched to the pool's Instances and not finished.")
POOL_CAPACITY = _proxy(
    "poolscope_proxy_pool_capacity_requests", "gauge",
    "Concurrent requests configured at the Proxy for its alive Instances "
    "(source=configured), 0 when none of them is alive; absent when no Instance, or "
    "an alive one, has none configured.")
PROXY_INSTANCES_FORGOTTEN = _proxy(
    "poolscope_proxy_instances_forgotten_total", "counter",
    "Instances the embedded Proxy forgot because they sent no heartbeat for its "
    "forget-after bound (FORGET_AFTER_S in poolscope.contract.thresholds), with "
    "every series about them; a deregistered Instance is not counted. A gateway keeps "
    "no members to forget.")
PROXY_COLLECTOR_SUCCESS = _proxy(
    "poolscope_proxy_collector_success", "gauge",
    "1 when the Proxy collector read its state, 0 when it failed.", "collector")
PROXY_COLLECTOR_DURATION = _proxy(
    "poolscope_proxy_collector_duration_seconds", "gauge",
    "How long the Proxy collector's last read took.", "collector")
PROXY_COLLECTOR_SAMPLE_AGE = _proxy(
    "poolscope_proxy_collector_sample_age_seconds", "gauge",
    "Seconds since the collector's last successful read, monotonic clock at scrape "
    "time (gateway mode, which reads the gateway's page in the background).", "collector")
PROXY_COLLECTOR_ERRORS = _proxy(
    "poolscope_proxy_collector_errors_total", "counter",
    "Failed reads by collector and reason (gateway mode).", "collector", "reason")
PROXY_GATEWAY_SERIES_SKIPPED = _proxy(
    "poolscope_proxy_gateway_series_skipped_total", "counter",
    "Series of the gateway's page left out of good reads, by reason (invalid_pool: its "
    "pool label is not a usable proxy_id; gateway mode with a pool label).", "reason")

OUTCOMES = ("ok", "error", "timeout", "rejected", "cancelled")
# The outcome of poolscope_proxy_requests_total that a gateway adapter publishes: every
# request the gateway counted, whatever its outcome (gateways do not split their
# request counter by outcome, and a difference of two counters is not a counter).
OUTCOME_ANY = "any"

# The `source` label's values. A series' source says which lower-layer module
# measured it; `derived` marks values the exporter computes from measured ones.
SOURCE_PSUTIL = "psutil"
SOURCE_NVML = "nvml"
SOURCE_CONFIGURED = "configured"
SOURCE_LEARNED = "learned"
SOURCE_DERIVED = "derived"
SOURCE_EXPORTER = "exporter"
SOURCE_PROXY_REGISTRY = "proxy_registry"
SOURCE_PROXY_DISPATCH = "proxy_dispatch"
SOURCE_PROXY_QUEUE = "proxy_queue"
SOURCE_SELF_DECLARED = "self_declared"
SOURCE_ENGINE = "engine"
GATEWAYS = ("llmgw", "gie")
ENGINES = ("vllm", "sglang", "tgi", "llamacpp", "trtllm", "trtllm-serve")


def engine_source(engine: str) -> str:
    """The source label of series read from an engine's own /metrics."""
    return f"engine:{engine}"


def gateway_source(gateway: str) -> str:
    """The source label of Proxy-side series read from a gateway's own /metrics."""
    return f"gateway:{gateway}"


def all_families() -> Sequence[Family]:
    """Every family declared above, in declaration order."""
    return [v for v in globals().values() if isinstance(v, Family)]
