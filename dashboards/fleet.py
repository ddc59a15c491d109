"""The fleet dashboard: every pool at a glance.

Its panels read the `proxy_pool:*` recording rules only, the same series the
Scheduler bridge serves, so the fleet seen here and the Scheduler's can never
disagree.
"""

from __future__ import annotations

from dashboards.grafana import Json, Panel, Row, Target, dashboard
from dashboards.queries import (
    DATA_QUALITY,
    PLACE,
    POOL_ADMISSION,
    POOL_VARIABLE,
    POOLS,
    avg_and_max,
    per_pool,
)
from poolscope.contract import thresholds


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
                  avg_and_max("proxy_pool:cpu_utilization"),
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
                  avg_and_max("proxy_pool:resource_freshness_seconds"),
                  unit="s"),
            Panel("timeseries", "GPU utilization",
                  "Healthy GPUs only. No data without a healthy GPU: unhealthy is not free.",
                  avg_and_max("proxy_pool:gpu_utilization"),
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
