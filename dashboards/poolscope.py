"""Poolscope's three Grafana dashboards: fleet, one pool, one Instance.

Pool-level panels read the `proxy_pool:*` recording rules, the same series
the Scheduler bridge serves, so a dashboard and the Scheduler can never
disagree. Instance-level panels read the exporters' raw series
(contract/catalog.py), which the rules read straight as well.

Every selector also matches `region` and `cluster`, so one dashboard serves a
single Prometheus and the federated global one (deploy/federation/: each
region Prometheus sets both as external labels, which /federate attaches to
every rollup). The Region variable lists the regions the global Prometheus
holds, Cluster the clusters of the selected regions, and Pool the pools of
those. "All" sends `.*`, which also matches a series without the label, as on
a single Prometheus, which sets neither.
"""

from __future__ import annotations

from dashboards.grafana import Json, Panel, Row, StateSet, Target, dashboard, query_variable
from poolscope.contract import thresholds

WHERE = 'region=~"$region",cluster=~"$cluster"'
POOLS = WHERE + ',proxy_id=~"$proxy_id"'
ONE_INSTANCE = POOLS + ',instance_id="$instance_id"'
RATE = "[$__rate_interval]"
# Grafana has no tokens unit; a custom suffix keeps the axis honest.
TOKENS_PER_S = "suffix: tokens/s"

DATA_QUALITY = StateSet("proxy_pool:data_quality", "quality", (
    ("complete", "green"), ("partial", "#EAB839"), ("missing", "red")))
ADMISSION_STATES = (("accepting", "green"), ("degraded", "#EAB839"), ("saturated", "orange"),
                    ("asleep", "purple"), ("draining", "blue"), ("unknown", "text"))
POOL_ADMISSION = StateSet("proxy_pool:admission_state", "state", ADMISSION_STATES)
INSTANCE_ADMISSION = StateSet("poolscope_instance_admission_state", "state", ADMISSION_STATES)
ALIVE = ((1, "alive", "green"), (0, "stale", "red"))
HEALTHY = ((1, "healthy", "green"), (0, "unhealthy", "red"))
COLLECTOR_OK = ((1, "ok", "green"), (0, "failed", "red"))


def sel(metric: str, matchers: str = POOLS) -> str:
    return f"{metric}{{{matchers}}}"


def per_pool(metric: str, legend: str = "{{proxy_id}}") -> Target:
    return Target(sel(metric), legend)


def quantiles(histogram: str, by: str, matchers: str, legend: str) -> tuple[Target, ...]:
    """p50/p95/p99 from a histogram; `>= 0` drops the NaN of a window with no
    observations, so an idle queue shows a gap instead of a made-up latency."""
    return tuple(
        Target(f"histogram_quantile({q}, sum by ({by}, le) "
               f"(rate({histogram}_bucket{{{matchers}}}{RATE}))) >= 0",
               f"{legend} p{round(q * 100)}")
        for q in (0.5, 0.95, 0.99))


def rate_by(counter: str, by: str, matchers: str, legend: str) -> Target:
    return Target(f"sum by ({by}) (rate({counter}{{{matchers}}}{RATE}))", legend)


REGION_VARIABLE = query_variable("region", "Region",
                                 "label_values(proxy_pool:instances:count, region)",
                                 multi=True, all_value=".*")
CLUSTER_VARIABLE = query_variable(
    "cluster", "Cluster",
    'label_values(proxy_pool:instances:count{region=~"$region"}, cluster)',
    multi=True, all_value=".*")
POOL_VARIABLE = query_variable("proxy_id", "Pool",
                               f"label_values(proxy_pool:instances:count{{{WHERE}}}, proxy_id)",
                               multi=True)
INSTANCE_VARIABLE = query_variable(
    "instance_id", "Instance",
    f"label_values(poolscope_proxy_instance_registered{{{POOLS}}}, instance_id)",
    multi=False)
PLACE = (REGION_VARIABLE, CLUSTER_VARIABLE)


def fleet() -> Json:
    gauge = {"kind": "bargauge", "width": 6, "height": 7}
    rows = (
        Row("Pools now", (
            Panel(**gauge, title="Load ratio", ratio=True, unit="percentunit",
                  description="Inflight / capacity over alive Instances that report both. "
                              "No data when either side is unknown.",
                  targets=(per_pool("proxy_pool:load:ratio"),)),
            Panel(**gauge, title="Saturation", ratio=True, unit="percentunit",
                  description="The worse of queue pressure and engine load "
                              f"(waiting / {thresholds.WAITING_Q:g}, KV cache / "
                              f"{thresholds.KV_FULL:g}); 100 % is the healthy limit.",
                  targets=(per_pool("proxy_pool:saturation:ratio"),)),
            Panel(**gauge, title="Queue pressure", ratio=True, unit="percentunit",
                  description="Queued requests / queue capacity, bounded queues only.",
                  targets=(per_pool("proxy_pool:queue_pressure:ratio"),)),
            Panel(**gauge, title="QPS (1m)", unit="reqps",
                  description="Requests the Proxy accepted per second over the last minute.",
                  targets=(per_pool("proxy_pool:requests:rate1m"),)),
        )),
        Row("State", (
            Panel("state-timeline", "Data quality",
                  "complete: every registered Instance alive with fresh host data and the "
                  "Proxy's queues and inflight measured; missing: nothing measured.",
                  (Target(DATA_QUALITY.expr(POOLS, "proxy_id"), "{{proxy_id}}"),),
                  mappings=DATA_QUALITY.mappings()),
            Panel("state-timeline", "Admission state",
                  "The best state any alive Instance of the pool offers.",
                  (Target(POOL_ADMISSION.expr(POOLS, "proxy_id"), "{{proxy_id}}"),),
                  mappings=POOL_ADMISSION.mappings()),
        )),
        Row("Instances", collapsed=True, panels=(
            Panel("timeseries", "Instances: alive, stale, missing resource, asleep",
                  "Registered at the Proxy; stale = heartbeat timed out; missing resource = "
                  "alive but no fresh host sample; asleep = the engine sleeps (no capacity "
                  "until woken).",
                  (per_pool("proxy_pool:instances:count", "{{proxy_id}} registered"),
                   per_pool("proxy_pool:instances_alive:count", "{{proxy_id}} alive"),
                   per_pool("proxy_pool:instances_stale:count", "{{proxy_id}} stale"),
                   per_pool("proxy_pool:instances_missing_resource:count",
                            "{{proxy_id}} missing resource"),
                   per_pool("proxy_pool:instances_asleep:count", "{{proxy_id}} asleep"))),
            Panel("timeseries", "Idle Instances",
                  f"Idle: no dispatch for {thresholds.IDLE_S / 60:g} minutes. Unknown: never "
                  "dispatched to since the Proxy started (unknown is not idle).",
                  (per_pool("proxy_pool:instances_idle:count", "{{proxy_id}} idle"),
                   per_pool("proxy_pool:instances_idle_unknown:count",
                            "{{proxy_id}} idle unknown"))),
        )),
        Row("Load over time", (
            Panel("timeseries", "Load ratio", "Inflight / capacity per pool.",
                  (per_pool("proxy_pool:load:ratio"),), unit="percentunit", ratio=True),
            Panel("timeseries", "Saturation", "max(queue pressure, engine load) per pool.",
                  (per_pool("proxy_pool:saturation:ratio"),), unit="percentunit", ratio=True),
            Panel("timeseries", "QPS (1m)", "Requests accepted per second.",
                  (per_pool("proxy_pool:requests:rate1m"),), unit="reqps"),
            Panel("timeseries", "Queue pressure", "Queued / queue capacity.",
                  (per_pool("proxy_pool:queue_pressure:ratio"),), unit="percentunit",
                  ratio=True),
            Panel("timeseries", "Inflight and capacity",
                  "Capacity counts alive Instances only: a dead one offers nothing.",
                  (per_pool("proxy_pool:inflight_requests:sum", "{{proxy_id}} inflight"),
                   per_pool("proxy_pool:capacity_requests:sum", "{{proxy_id}} capacity"))),
            Panel("timeseries", "Queue depth", "Requests waiting in the Proxy's queues.",
                  (per_pool("proxy_pool:queue_depth:sum", "{{proxy_id}} {{queue}}"),)),
            Panel("timeseries", "Engine requests",
                  "Running and waiting inside the engines, behind the Proxy's queues.",
                  (per_pool("proxy_pool:engine_requests_running:sum", "{{proxy_id}} running"),
                   per_pool("proxy_pool:engine_requests_waiting:sum",
                            "{{proxy_id}} waiting"))),
            Panel("timeseries", "KV cache usage",
                  "Mean over engines that expose it, and the fullest data-parallel rank.",
                  (per_pool("proxy_pool:kv_cache_usage:avg", "{{proxy_id}} mean"),
                   per_pool("proxy_pool:kv_cache_usage:max", "{{proxy_id}} fullest rank")),
                  unit="percentunit", ratio=True),
        )),
        Row("Resources", collapsed=True, panels=(
            Panel("timeseries", "CPU", "Hosts with fresh samples only.",
                  (per_pool("proxy_pool:cpu_utilization:avg", "{{proxy_id}} avg"),
                   per_pool("proxy_pool:cpu_utilization:max", "{{proxy_id}} max")),
                  unit="percentunit", ratio=True),
            Panel("timeseries", "Memory used", "Used / total over hosts with fresh samples.",
                  (per_pool("proxy_pool:memory_used:ratio"),), unit="percentunit",
                  ratio=True),
            Panel("timeseries", "Network", "All non-loopback interfaces of fresh hosts.",
                  (per_pool("proxy_pool:network_receive_bytes:rate1m", "{{proxy_id}} rx"),
                   per_pool("proxy_pool:network_transmit_bytes:rate1m", "{{proxy_id}} tx")),
                  unit="Bps"),
            Panel("timeseries", "Resource freshness",
                  "Age of the host samples; the max shows one stuck collector first.",
                  (per_pool("proxy_pool:resource_freshness_seconds:avg", "{{proxy_id}} avg"),
                   per_pool("proxy_pool:resource_freshness_seconds:max", "{{proxy_id}} max")),
                  unit="s"),
            Panel("timeseries", "GPU utilization",
                  "Healthy GPUs only. No data without a healthy GPU: unhealthy is not free.",
                  (per_pool("proxy_pool:gpu_utilization:avg", "{{proxy_id}} avg"),
                   per_pool("proxy_pool:gpu_utilization:max", "{{proxy_id}} max")),
                  unit="percentunit", ratio=True),
            Panel("timeseries", "GPU memory used", "Used / total over healthy GPUs.",
                  (per_pool("proxy_pool:gpu_memory_used:ratio"),), unit="percentunit",
                  ratio=True),
        )),
    )
    return dashboard(uid="poolscope-fleet", title="Poolscope / Fleet",
                     description="Every pool at a glance: load, saturation, QPS, queues, "
                                 "data quality, admission, Instances.",
                     variables=(*PLACE, POOL_VARIABLE), rows=rows)


def pool() -> Json:
    stat = {"kind": "stat", "width": 4, "height": 4}
    per_instance = "{{proxy_id}} {{instance_id}}"
    rows = (
        Row("Pool now", (
            Panel(**stat, title="Registered", description="Instances the Proxy registers.",
                  targets=(per_pool("proxy_pool:instances:count"),)),
            Panel(**stat, title="Alive", description="Heartbeat within the Proxy's timeout.",
                  targets=(per_pool("proxy_pool:instances_alive:count"),)),
            Panel(**stat, title="Stale", description="Registered, heartbeat timed out.",
                  targets=(per_pool("proxy_pool:instances_stale:count"),)),
            Panel(**stat, title="Missing resource", description="Alive, no fresh host sample.",
                  targets=(per_pool("proxy_pool:instances_missing_resource:count"),)),
            Panel(**stat, title="Load ratio", unit="percentunit", ratio=True,
                  description="Inflight / capacity.",
                  targets=(per_pool("proxy_pool:load:ratio"),)),
            Panel(**stat, title="Saturation", unit="percentunit", ratio=True,
                  description="max(queue pressure, engine load).",
                  targets=(per_pool("proxy_pool:saturation:ratio"),)),
        )),
        Row("Instances", (
            Panel("timeseries", "Inflight per Instance",
                  "Dispatched by the Proxy and not yet finished.",
                  (per_pool("poolscope_proxy_instance_inflight_requests", per_instance),)),
            Panel("timeseries", "Capacity per Instance",
                  "Configured at the Proxy (wins), else configured or learned at the Instance.",
                  (per_pool("poolscope_proxy_instance_capacity_requests",
                            per_instance + " at Proxy ({{source}})"),
                   per_pool("poolscope_instance_capacity_requests",
                            per_instance + " at Instance ({{source}})"))),
            Panel("state-timeline", "Alive at the Proxy", "Heartbeat verdict per Instance.",
                  (per_pool("poolscope_proxy_instance_alive", per_instance),),
                  mappings=ALIVE),
            Panel("timeseries", "Freshness",
                  "Heartbeat age at the Proxy and host-sample age at the exporter.",
                  (per_pool("poolscope_proxy_instance_heartbeat_age_seconds",
                            per_instance + " heartbeat"),
                   Target(sel("poolscope_collector_sample_age_seconds",
                              POOLS + ',collector="host"'), per_instance + " host sample")),
                  unit="s"),
            Panel("timeseries", "CPU per Instance", "Host CPU busy, all cores.",
                  (per_pool("poolscope_host_cpu_utilization_ratio", per_instance),),
                  unit="percentunit", ratio=True),
            Panel("timeseries", "Memory used per Instance",
                  "Host memory used / total; a host reporting no total shows a gap.",
                  (Target(f"{sel('poolscope_host_memory_used_bytes')} / "
                          f"({sel('poolscope_host_memory_total_bytes')} > 0)", per_instance),),
                  unit="percentunit", ratio=True),
            Panel("timeseries", "Engine running and waiting", "The engines' own queue view.",
                  (per_pool("poolscope_engine_requests_running", per_instance + " running"),
                   per_pool("poolscope_engine_requests_waiting", per_instance + " waiting"))),
            Panel("timeseries", "KV cache per Instance",
                  "Mean over the engine's ranks; absent for engines without it (TGI, "
                  "llama.cpp).",
                  (per_pool("poolscope_engine_kv_cache_usage_ratio", per_instance),),
                  unit="percentunit", ratio=True),
            Panel("timeseries", "Requests per Instance", "Dispatched by the Proxy, by outcome.",
                  (rate_by("poolscope_proxy_instance_requests_total",
                           "proxy_id, instance_id, outcome", POOLS,
                           per_instance + " {{outcome}}"),), unit="reqps"),
            Panel("timeseries", "Request duration per Instance",
                  "Dispatch to completion; a gap means no request finished in the window.",
                  quantiles("poolscope_proxy_instance_request_duration_seconds",
                            "proxy_id, instance_id", POOLS, per_instance), unit="s"),
        )),
        Row("Queues", collapsed=True, panels=(
            Panel("timeseries", "Queue depth and capacity",
                  "Capacity is absent for an unbounded queue.",
                  (per_pool("proxy_pool:queue_depth:sum", "{{proxy_id}} {{queue}}"),
                   per_pool("poolscope_proxy_queue_capacity",
                            "{{proxy_id}} {{queue}} capacity"))),
            Panel("timeseries", "Queue pressure", "Queued / capacity, bounded queues only.",
                  (per_pool("proxy_pool:queue_pressure:ratio"),), unit="percentunit",
                  ratio=True),
            Panel("timeseries", "Queue wait", "Time in the queue before leaving it.",
                  quantiles("poolscope_proxy_queue_wait_seconds", "proxy_id, queue", POOLS,
                            "{{proxy_id}} {{queue}}"), unit="s"),
            Panel("timeseries", "Queue rejections", "Turned away: queue full or timed out.",
                  (rate_by("poolscope_proxy_queue_rejections_total", "proxy_id, queue, reason",
                           POOLS, "{{proxy_id}} {{queue}} {{reason}}"),), unit="reqps"),
            Panel("timeseries", "Requests by outcome", "Requests the Proxy accepted.",
                  (rate_by("poolscope_proxy_requests_total", "proxy_id, outcome", POOLS,
                           "{{proxy_id}} {{outcome}}"),), unit="reqps"),
            Panel("state-timeline", "Proxy collector", "Whether the Proxy could read its state.",
                  (per_pool("poolscope_proxy_collector_success",
                            "{{proxy_id}} {{collector}}"),), mappings=COLLECTOR_OK),
        )),
        Row("GPUs", collapsed=True, panels=(
            Panel("timeseries", "GPU utilization per GPU", "Healthy GPUs' busy fraction.",
                  (per_pool("poolscope_gpu_utilization_ratio",
                            per_instance + " GPU {{gpu}} {{gpu_model}}"),),
                  unit="percentunit", ratio=True),
            Panel("timeseries", "GPU memory used per GPU", "Framebuffer used / total.",
                  (Target(f"{sel('poolscope_gpu_memory_used_bytes')} / "
                          f"({sel('poolscope_gpu_memory_total_bytes')} > 0)",
                          per_instance + " GPU {{gpu}}"),), unit="percentunit", ratio=True),
            Panel("bargauge", "GPUs per model",
                  "Healthy and unhealthy apart: an unhealthy GPU is neither used nor free.",
                  (per_pool("proxy_pool:gpus:count", "{{proxy_id}} {{gpu_model}} {{health}}"),),
                  width=8),
            Panel("bargauge", "GPU memory per model", "Framebuffer of healthy GPUs.",
                  (per_pool("proxy_pool:gpu_memory_total_bytes:sum",
                            "{{proxy_id}} {{gpu_model}}"),), unit="bytes", width=8),
            Panel("timeseries", "Pool GPU utilization", "Healthy GPUs of fresh Instances.",
                  (per_pool("proxy_pool:gpu_utilization:avg", "{{proxy_id}} avg"),
                   per_pool("proxy_pool:gpu_utilization:max", "{{proxy_id}} max"),
                   per_pool("proxy_pool:gpu_memory_used:ratio", "{{proxy_id}} memory")),
                  unit="percentunit", ratio=True, width=8),
        )),
    )
    return dashboard(uid="poolscope-pool", title="Poolscope / Pool",
                     description="One pool in detail: its Instances, queues and GPUs.",
                     variables=(*PLACE, POOL_VARIABLE), rows=rows)


def instance() -> Json:
    def one(metric: str, legend: str) -> Target:
        return Target(sel(metric, ONE_INSTANCE), legend)

    rows = (
        Row("At the Proxy", (
            Panel("state-timeline", "Alive", "The Proxy's heartbeat verdict.",
                  (one("poolscope_proxy_instance_alive", "{{instance_id}}"),),
                  mappings=ALIVE, width=8),
            Panel("timeseries", "Inflight and capacity", "As the Proxy sees the Instance.",
                  (one("poolscope_proxy_instance_inflight_requests", "inflight"),
                   one("poolscope_proxy_instance_capacity_requests", "capacity at Proxy")),
                  width=8),
            Panel("timeseries", "Heartbeat age and idle time",
                  "Idle time is absent before the first dispatch: unknown, not idle.",
                  (one("poolscope_proxy_instance_heartbeat_age_seconds", "heartbeat age"),
                   one("poolscope_proxy_instance_idle_seconds", "idle")), unit="s", width=8),
            Panel("timeseries", "Requests", "Dispatched by the Proxy, by outcome.",
                  (rate_by("poolscope_proxy_instance_requests_total", "outcome", ONE_INSTANCE,
                           "{{outcome}}"),), unit="reqps"),
            Panel("timeseries", "Request duration", "Dispatch to completion.",
                  quantiles("poolscope_proxy_instance_request_duration_seconds",
                            "instance_id", ONE_INSTANCE, "duration"), unit="s"),
        )),
        Row("Host", collapsed=True, panels=(
            Panel("timeseries", "CPU", "Busy time, all cores.",
                  (one("poolscope_host_cpu_utilization_ratio", "cpu"),),
                  unit="percentunit", ratio=True, width=8),
            Panel("stat", "CPUs", "Logical CPUs.", (one("poolscope_host_cpus", "cpus"),),
                  width=4),
            Panel("timeseries", "Memory", "Used, available and total host memory.",
                  (one("poolscope_host_memory_used_bytes", "used"),
                   one("poolscope_host_memory_available_bytes", "available"),
                   one("poolscope_host_memory_total_bytes", "total")), unit="bytes"),
            Panel("timeseries", "Network", "Per interface, loopback excluded.",
                  (rate_by("poolscope_host_network_receive_bytes_total", "device",
                           ONE_INSTANCE, "{{device}} rx"),
                   rate_by("poolscope_host_network_transmit_bytes_total", "device",
                           ONE_INSTANCE, "{{device}} tx")), unit="Bps", width=24),
        )),
        Row("Engine", collapsed=True, panels=(
            Panel("timeseries", "Requests running and waiting", "The engine's own view.",
                  (one("poolscope_engine_requests_running", "running"),
                   one("poolscope_engine_requests_waiting", "waiting")), width=8),
            Panel("timeseries", "KV cache usage",
                  "Mean over the engine's ranks and the fullest rank; absent for engines "
                  "without it (TGI, llama.cpp).",
                  (one("poolscope_engine_kv_cache_usage_ratio", "mean"),
                   one("poolscope_engine_kv_cache_usage_max_ratio", "fullest rank")),
                  unit="percentunit", ratio=True, width=8),
            Panel("timeseries", "Capacity",
                  "configured (--capacity), stated by the engine, or learned (the most "
                  "running at once in the last hour).",
                  (one("poolscope_instance_capacity_requests", "{{source}}"),), width=8),
            Panel("timeseries", "Requests completed", "The engine's own counter of "
                  "successful requests.",
                  (rate_by("poolscope_engine_request_success_total", "instance_id",
                           ONE_INSTANCE, "requests ok"),), unit="reqps", width=8),
            # Tokens/s apart from requests/s: one axis for both hides the smaller.
            Panel("timeseries", "Token throughput", "The engine's own token counters.",
                  (rate_by("poolscope_engine_prompt_tokens_total", "instance_id",
                           ONE_INSTANCE, "prompt tokens"),
                   rate_by("poolscope_engine_generation_tokens_total", "instance_id",
                           ONE_INSTANCE, "generation tokens")), unit=TOKENS_PER_S, width=8),
            Panel("state-timeline", "Admission state", "The Instance's current state.",
                  (Target(INSTANCE_ADMISSION.expr(ONE_INSTANCE, "instance_id"),
                          "{{instance_id}}"),), mappings=INSTANCE_ADMISSION.mappings(),
                  width=8),
        )),
        Row("GPUs", collapsed=True, panels=(
            Panel("stat", "GPUs", "Absent when NVML cannot be initialised: on a host without "
                  "an NVIDIA driver poolscope_collector_unavailable_info{collector=\"gpu\"} "
                  "says so (a state, not a failure).",
                  (one("poolscope_gpu_devices", "gpus"),), width=4),
            Panel("state-timeline", "GPU health", "A failing read makes a GPU unhealthy.",
                  (one("poolscope_gpu_healthy", "GPU {{gpu}} {{gpu_model}}"),),
                  mappings=HEALTHY, width=20),
            Panel("timeseries", "GPU utilization", "Busy fraction per GPU.",
                  (one("poolscope_gpu_utilization_ratio", "GPU {{gpu}}"),),
                  unit="percentunit", ratio=True, width=6),
            Panel("timeseries", "GPU memory", "Framebuffer used and total per GPU.",
                  (one("poolscope_gpu_memory_used_bytes", "GPU {{gpu}} used"),
                   one("poolscope_gpu_memory_total_bytes", "GPU {{gpu}} total")),
                  unit="bytes", width=6),
            Panel("timeseries", "GPU power", "Power draw per GPU.",
                  (one("poolscope_gpu_power_watts", "GPU {{gpu}}"),), unit="watt", width=6),
            Panel("timeseries", "GPU temperature", "Core temperature per GPU.",
                  (one("poolscope_gpu_temperature_celsius", "GPU {{gpu}}"),),
                  unit="celsius", width=6),
        )),
        Row("Collectors", collapsed=True, panels=(
            Panel("state-timeline", "Collector success", "Each collector fails alone.",
                  (one("poolscope_collector_success", "{{collector}}"),),
                  mappings=COLLECTOR_OK),
            Panel("timeseries", "Collector errors", "Failed samples by collector and reason.",
                  (rate_by("poolscope_collector_errors_total", "collector, reason",
                           ONE_INSTANCE, "{{collector}} {{reason}}"),), unit="ops"),
            Panel("timeseries", "Sample age", "Seconds since each collector's last success.",
                  (one("poolscope_collector_sample_age_seconds", "{{collector}}"),), unit="s"),
            Panel("timeseries", "Sample duration", "How long each collector's last sample took.",
                  (one("poolscope_collector_duration_seconds", "{{collector}}"),), unit="s"),
        )),
    )
    return dashboard(uid="poolscope-instance", title="Poolscope / Instance",
                     description="One Instance: the Proxy's view, host, engine, GPUs and the "
                                 "exporter's collectors.",
                     variables=(*PLACE, POOL_VARIABLE, INSTANCE_VARIABLE), rows=rows)


DASHBOARDS = {"poolscope-fleet.json": fleet, "poolscope-pool.json": pool,
              "poolscope-instance.json": instance}
