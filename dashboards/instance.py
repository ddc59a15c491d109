"""The Instance dashboard: one Instance as the Proxy, its host, its engine, its
GPUs and its exporter's collectors see it.

Every panel reads the exporters' raw series (contract/catalog.py) of the one
Instance the Instance variable picks.
"""

from __future__ import annotations

from dashboards.grafana import Json, Panel, Row, Target, dashboard
from dashboards.queries import (
    ALIVE,
    COLLECTOR_OK,
    HEALTHY,
    INSTANCE_ADMISSION,
    INSTANCE_VARIABLE,
    ONE_INSTANCE,
    PLACE,
    POOL_VARIABLE,
    quantiles,
    rate_by,
    sel,
)

# Grafana has no tokens unit; a custom suffix keeps the axis honest.
TOKENS_PER_S = "suffix: tokens/s"


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
