"""The pool dashboard: one pool in detail, its Instances, queues and GPUs.

Pool-level panels read the `proxy_pool:*` recording rules, as the Scheduler
bridge does; per-Instance panels read the exporters' raw series
(contract/catalog.py), which the rules read straight as well.
"""

from __future__ import annotations

from dashboards.grafana import Json, Panel, Row, Target, dashboard
from dashboards.queries import (
    ALIVE,
    COLLECTOR_OK,
    PLACE,
    POOL_VARIABLE,
    POOLS,
    avg_and_max,
    per_pool,
    quantiles,
    rate_by,
    sel,
)


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
                  (*avg_and_max("proxy_pool:gpu_utilization"),
                   per_pool("proxy_pool:gpu_memory_used:ratio", "{{proxy_id}} memory")),
                  unit="percentunit", ratio=True, width=8),
        )),
    )
    return dashboard(uid="poolscope-pool", title="Poolscope / Pool",
                     description="One pool in detail: its Instances, queues and GPUs.",
                     variables=(*PLACE, POOL_VARIABLE), rows=rows)
