"""No alert fires on a fleet that needs nothing done: healthy, idle, GPU-less, or just
after its Proxy restarted (idle time unknown), run through the recording rules and the
alerts together by promtool, for well past every alert's `for:`; none but the Watchdog,
which fires on every fleet (its silence is what a dead man's switch pages for).

The per-alert cases (firing, resolving) are in rules/tests/poolscope.alerts.*.yml; this
module holds the fleets, built once here because every alert must stay silent on each.
A fleet with one fault added must make promtool fail, or the silence proves nothing.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from harness.prometheus import REPO, binary
from poolscope.contract.catalog import ADMISSION_LEVELS, OUTCOMES
from poolscope.contract.thresholds import ALERT_DEGRADED_S, IDLE_GPUS_S, IDLE_S

ALERTS = REPO / "rules" / "alerts.yml"
WATCHDOG = {"exp_labels": {"severity": "none"}, "exp_annotations": next(
    r["annotations"] for g in yaml.safe_load(ALERTS.read_text())["groups"]
    for r in g["rules"] if r.get("alert") == "PoolscopeWatchdog")}
RECORDING = REPO / "rules" / "proxy_pool.yml"
STEP_S = 5
MODEL = "NVIDIA H100 80GB HBM3"
PROMETHEUS = 'job="prometheus",instance="127.0.0.1:9090"'
RULE_GROUP = '/etc/prometheus/rules/proxy_pool.yml;poolscope.proxy_pool'


def alert_names() -> list[str]:
    return [r["alert"] for g in yaml.safe_load(ALERTS.read_text())["groups"]
            for r in g["rules"] if "alert" in r]


@dataclass
class Fleet:
    """Input series of one fleet, scraped every STEP_S for `minutes`.

    Pool pa has an embedded Proxy and Instances a1, a2; pool pb has no Proxy-side
    source (its Instance b1 declares it). `busy` is whether requests flow; `gpus`
    whether the hosts have any; `idle_since_s` how long before the start the Proxy
    last dispatched (None: the Proxy restarted and has not dispatched since)."""

    minutes: int
    busy: bool = True
    gpus: bool = True
    idle_since_s: float | None = 0.0
    faults: dict[str, str] = field(default_factory=dict)
    series: list[dict[str, str]] = field(default_factory=list)

    @property
    def steps(self) -> int:
        return self.minutes * 60 // STEP_S

    def add(self, name: str, labels: str, values: str) -> None:
        self.series.append({"series": f"{name}{{{labels}}}",
                            "values": self.faults.get(f"{name}{{{labels}}}", values)})

    def gauge(self, name: str, labels: str, value: float) -> None:
        self.add(name, labels, f"{value:g}x{self.steps}")

    def counter(self, name: str, labels: str, per_step: float) -> None:
        self.add(name, labels, f"0+{per_step:g}x{self.steps}")

    def build(self) -> list[dict[str, str]]:
        self.series.clear()
        self._prometheus_and_bridge()
        self._proxy("pa", ["a1", "a2"])
        for pool, instance in (("pa", "a1"), ("pa", "a2"), ("pb", "b1")):
            self._instance(pool, instance)
        return self.series

    def _prometheus_and_bridge(self) -> None:
        self.gauge("up", PROMETHEUS, 1)
        self.add("prometheus_rule_group_last_evaluation_timestamp_seconds",
                 f'{PROMETHEUS},rule_group="{RULE_GROUP}"', f"0+{STEP_S}x{self.steps}")
        self.gauge("prometheus_rule_evaluation_failures_total",
                   f'{PROMETHEUS},rule_group="{RULE_GROUP}"', 0)
        bridge = 'job="poolscope-scheduler-bridge",instance="127.0.0.1:10130"'
        self.gauge("up", bridge, 1)
        for cause in ("clock_skew", "timeout"):
            self.gauge("poolscope_scheduler_bridge_backend_query_errors_total",
                       f'{bridge},backend="http://127.0.0.1:9090",cause="{cause}"', 0)
        # The Scheduler asks every scrape interval and is answered; no 503 so far.
        answers = f'{bridge},route="/debug/proxy_pool_resources"'
        self.counter("poolscope_scheduler_bridge_request_duration_seconds_count",
                     f'{answers},status="200"', 1)
        self.gauge("poolscope_scheduler_bridge_request_duration_seconds_count",
                   f'{answers},status="503"', 0)

    def _proxy(self, pool: str, instances: list[str]) -> None:
        target = f'job="poolscope-proxy",instance="{pool}:9200",proxy_id="{pool}"'
        self.gauge("up", target, 1)
        n = len(instances)
        for name, value in (("registered", n), ("alive", n), ("stale", 0)):
            self.gauge(f"poolscope_proxy_pool_instances_{name}",
                       f'{target},source="proxy_registry"', value)
        idle = self.idle_since_s is not None and not self.busy and self.idle_since_s > IDLE_S
        self.gauge("poolscope_proxy_pool_instances_idle", f'{target},source="proxy_dispatch"',
                   n if idle else 0)
        self.gauge("poolscope_proxy_pool_instances_idle_unknown",
                   f'{target},source="proxy_dispatch"', n if self.idle_since_s is None else 0)
        self.gauge("poolscope_proxy_pool_inflight_requests", f'{target},source="proxy_dispatch"',
                   4 if self.busy else 0)
        self.gauge("poolscope_proxy_pool_capacity_requests", f'{target},source="configured"', 16)
        self.counter("poolscope_proxy_requests_total",
                     f'{target},outcome="ok",source="proxy_dispatch"', 10 if self.busy else 0)
        # The Proxy publishes every outcome, a measured 0 until one happens.
        for outcome in (o for o in OUTCOMES if o != "ok"):
            self.gauge("poolscope_proxy_requests_total",
                       f'{target},outcome="{outcome}",source="proxy_dispatch"', 0)
        self.gauge("poolscope_proxy_collector_success",
                   f'{target},collector="proxy",source="exporter"', 1)
        for queue in ("prepare", "ready"):
            labels = f'{target},queue="{queue}"'
            self.gauge("poolscope_proxy_queue_depth", f'{labels},source="proxy_queue"',
                       1 if self.busy else 0)
            self.gauge("poolscope_proxy_queue_capacity", f'{labels},source="configured"', 32)
            self.gauge("poolscope_proxy_queue_rejections_total",
                       f'{labels},reason="full",source="proxy_queue"', 0)
        for instance in instances:
            one = f'{target},instance_id="{instance}"'
            self.gauge("poolscope_proxy_instance_registered", f'{one},source="proxy_registry"', 1)
            self.gauge("poolscope_proxy_instance_alive", f'{one},source="proxy_registry"', 1)
            if self.idle_since_s is not None:
                start = 1 if self.busy else self.idle_since_s
                self.add("poolscope_proxy_instance_idle_seconds", f'{one},source="proxy_dispatch"',
                         f"{start:g}x{self.steps}" if self.busy
                         else f"{start:g}+{STEP_S}x{self.steps}")

    def _instance(self, pool: str, instance: str) -> None:
        target = (f'job="poolscope-instance",instance="{instance}:10100",proxy_id="{pool}",'
                  f'instance_id="{instance}"')
        self.gauge("up", target, 1)
        for collector in ("host", "engine", *(("gpu",) if self.gpus else ())):
            labels = f'{target},collector="{collector}",source="exporter"'
            self.gauge("poolscope_collector_success", labels, 1)
            self.gauge("poolscope_collector_sample_age_seconds", labels, 1)
        if not self.gpus:
            self.gauge("poolscope_collector_unavailable_info",
                       f'{target},collector="gpu",reason="no_nvml_library",source="exporter"', 1)
        host, engine = f'{target},source="psutil"', f'{target},source="engine:vllm"'
        self.gauge("poolscope_host_cpu_utilization_ratio", host, 0.3)
        self.gauge("poolscope_host_memory_used_bytes", host, 4e9)
        self.gauge("poolscope_host_memory_total_bytes", host, 16e9)
        self.gauge("poolscope_host_network_receive_bytes_per_second", host, 2e4)
        self.gauge("poolscope_host_network_transmit_bytes_per_second", host, 2e4)
        running = 2 if self.busy else 0
        self.gauge("poolscope_engine_requests_running", engine, running)
        self.gauge("poolscope_engine_requests_waiting", engine, 0)
        self.gauge("poolscope_engine_kv_cache_usage_ratio", engine, 0.2 if self.busy else 0)
        self.gauge("poolscope_engine_kv_cache_usage_max_ratio", engine, 0.2 if self.busy else 0)
        self.gauge("poolscope_engine_saturation_ratio", engine, 0.25 if self.busy else 0)
        self.gauge("poolscope_engine_request_success_per_second", engine, 1 if self.busy else 0)
        self.gauge("poolscope_instance_capacity_requests", f'{target},source="configured"', 8)
        self.gauge("poolscope_instance_admission_level", f'{target},source="derived"',
                   ADMISSION_LEVELS["accepting"])
        if not self.gpus:
            return
        nvml = f'{target},gpu_model="{MODEL}",source="nvml"'
        self.gauge("poolscope_gpu_healthy", f'{nvml},gpu="0",gpu_uuid="GPU-{instance}"', 1)
        self.gauge("poolscope_instance_gpus", f'{nvml},health="healthy"', 1)
        self.gauge("poolscope_instance_gpus", f'{nvml},health="unhealthy"', 0)
        self.gauge("poolscope_instance_gpu_utilization_sum_ratio", nvml, 0.6 if self.busy else 0)
        self.gauge("poolscope_instance_gpu_utilization_max_ratio", nvml, 0.6 if self.busy else 0)
        self.gauge("poolscope_instance_gpu_memory_used_bytes", nvml, 7e10)
        self.gauge("poolscope_instance_gpu_memory_total_bytes", nvml, 8e10)


# Evaluated well past the longest `for:`; an idle fleet only until just before its
# Instances have been idle IDLE_GPUS_S (then the info alert is due: its own case).
IDLE_START_S = 2 * IDLE_S
FLEETS = {
    "healthy": Fleet(minutes=int(3 * ALERT_DEGRADED_S // 60)),
    "idle": Fleet(minutes=int((IDLE_GPUS_S - IDLE_START_S) // 60) - 1, busy=False,
                  idle_since_s=IDLE_START_S),
    "gpu-less": Fleet(minutes=int(3 * ALERT_DEGRADED_S // 60), gpus=False),
    "restarted and idle": Fleet(minutes=int(IDLE_GPUS_S // 60) + 10, busy=False,
                                idle_since_s=None),
}


def eval_times(fleet: Fleet) -> Iterator[str]:
    yield from (f"{m}m" for m in sorted({fleet.minutes // 2, fleet.minutes - 1}))


def promtool_silence(tmp_path: Path, fleet: Fleet) -> subprocess.CompletedProcess[str]:
    spec = {
        "rule_files": [str(RECORDING), str(ALERTS)],
        "evaluation_interval": f"{STEP_S}s",
        "tests": [{
            "name": "no alert fires",
            "interval": f"{STEP_S}s",
            "input_series": fleet.build(),
            "alert_rule_test": [
                {"eval_time": t, "alertname": name,
                 "exp_alerts": [WATCHDOG] if name == "PoolscopeWatchdog" else []}
                for t in eval_times(fleet) for name in alert_names()],
        }],
    }
    path = tmp_path / "fleet.yml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return subprocess.run([binary("promtool"), "test", "rules", str(path)],
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize("name", FLEETS)
def test_no_alert_fires_on_a_fleet_that_needs_nothing(tmp_path: Path, name: str) -> None:
    done = promtool_silence(tmp_path, FLEETS[name])
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr


A1 = 'job="poolscope-instance",instance="a1:10100",proxy_id="pa",instance_id="a1"'
PA = 'job="poolscope-proxy",instance="pa:9200",proxy_id="pa"'
# One request in five failing for twenty minutes, which the fast burn must page for, from
# the first minute (the fleet answers 10 requests a scrape: 2.5 errors beside them are a
# fifth).
ERRORS_20M = f"0x{60 // STEP_S} 2.5+2.5x{20 * 60 // STEP_S - 1} 600x{10 * 60 // STEP_S}"


@pytest.mark.parametrize(("series", "values", "alert"), [
    # Not the engine's: its window covers a model load, longer than the fleet runs.
    (f'poolscope_collector_success{{{A1},collector="gpu",source="exporter"}}', "1x10 0x400",
     "PoolscopeCollectorFailing"),
    (f'up{{{A1}}}', "1x10 0x400", "PoolscopeInstanceExporterDown"),
    (f'poolscope_gpu_healthy{{{A1},gpu_model="{MODEL}",source="nvml",gpu="0",gpu_uuid="GPU-a1"}}',
     "1x10 0x400", "PoolscopeGpuUnhealthy"),
    (f'poolscope_proxy_pool_instances_alive{{{PA},source="proxy_registry"}}', "2x10 0x400",
     "PoolscopePoolNoAliveMembers"),
    ('up{job="poolscope-scheduler-bridge",instance="127.0.0.1:10130"}', "1x10 0x400",
     "PoolscopeSchedulerBridgeServingNothing"),
    (f'poolscope_proxy_requests_total{{{PA},outcome="error",source="proxy_dispatch"}}',
     ERRORS_20M, "PoolscopeRequestErrorsFastBurn"),
])
def test_a_fleet_with_a_fault_is_not_silent(tmp_path: Path, series: str, values: str,
                                            alert: str) -> None:
    """The silence above is checked: one fault in the healthy fleet fails it, by name."""
    fleet = Fleet(minutes=FLEETS["healthy"].minutes, faults={series: values})
    done = promtool_silence(tmp_path, fleet)
    assert done.returncode != 0
    assert f"alertname: {alert}" in done.stdout + done.stderr, done.stderr[-4000:]
