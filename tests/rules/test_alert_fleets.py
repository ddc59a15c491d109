"""No alert fires on a fleet that needs nothing done: healthy, idle, GPU-less, or just
after its Proxy restarted (idle time unknown), run through the recording rules and the
alerts together by promtool, for well past every alert's `for:`; none but the Watchdog,
which fires on every fleet (its silence is what a dead man's switch pages for).

The per-alert cases (firing, resolving) are in rules/tests/poolscope.alerts.*.yml; this
module holds the fleets, built once here because every alert must stay silent on each.
A fleet with one fault added must make promtool fail, or the silence proves nothing.

Then each fault class as an on-call meets it (TIMELINES), over hours: KV-heavy but
healthy, a cold start shorter and longer than a model load, a Proxy source vanished, a
pool dead, a pool emptied on purpose, errors in a burst and in a trickle. Each checks the
exact set of alerts firing, by name and severity, at several minutes, and how long each
has fired without a break (ALERTS_FOR_STATE), so a wrong rule, severity or window fails
it. The input series are the exporters' own (contract/catalog.py); an engine's
saturation and admission level are computed by the Instance exporter's code.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.prometheus import REPO, binary
from poolscope.contract.catalog import ADMISSION_LEVELS, OUTCOMES
from poolscope.contract.thresholds import (
    ALERT_DEGRADED_S,
    ALERT_ENGINE_LOAD_S,
    FORGET_AFTER_S,
    IDLE_GPUS_S,
    IDLE_S,
)
from poolscope.exporters.instance.admission import AdmissionInputs, AdmissionThresholds, decide
from poolscope.exporters.instance.engine import EngineSample

ALERTS = REPO / "rules" / "alerts.yml"
WATCHDOG = {"exp_labels": {"severity": "none"}, "exp_annotations": next(
    r["annotations"] for g in yaml.safe_load(ALERTS.read_text())["groups"]
    for r in g["rules"] if r.get("alert") == "PoolscopeWatchdog")}
RECORDING = REPO / "rules" / "proxy_pool.yml"
STEP_S = 5
MODEL = "NVIDIA H100 80GB HBM3"
PROMETHEUS = 'job="prometheus",instance="127.0.0.1:9090"'
RULE_GROUP = '/etc/prometheus/rules/proxy_pool.yml;poolscope.proxy_pool'
# The Proxy answers 10 requests a scrape while busy.
OK_PER_STEP = 10.0
# How long a busy engine's KV-cache usage holds one of a Fleet's `kv` values.
KV_PHASE_S = 600


def eval_order() -> list[str]:
    """Every group, those that only record first (the recording file's, then the alert
    file's records), so that at a shared instant an alert reads this instant's records.
    promtool otherwise orders groups at random, and an alert's `for:` ending on a check
    would fire in one run and not the next; Prometheus runs groups apart, and an alert
    may read a record one group interval old, which the checks' margins allow."""
    groups = [g for f in (RECORDING, ALERTS) for g in yaml.safe_load(f.read_text())["groups"]]
    return [g["name"] for g in sorted(groups, key=lambda g: any("alert" in r
                                                                for r in g["rules"]))]


def alert_names() -> list[str]:
    return [r["alert"] for g in yaml.safe_load(ALERTS.read_text())["groups"]
            for r in g["rules"] if "alert" in r]


Signal = Callable[[int], float]
"""A series' value at each scrape (its index from the start), before any Change."""


@dataclass(frozen=True)
class Change:
    """From minute `start` to minute `end` (None: to the end of the run), every series whose
    text (`name{labels}`, as Fleet writes it) contains `match` reads `value`: a gauge's
    value, a counter's increase per scrape (it counts on from where it stood), None for no
    sample at all (its target gone, its collector failing). A later Change wins where two
    cover one scrape. Faults that unfold over hours are written as these, so that each
    series keeps the labels and the shape its exporter gives it."""

    match: str
    start: float
    end: float | None = None
    value: float | None = None

    def covers(self, text: str, step: int) -> bool:
        minute = step * STEP_S / 60
        return (self.match in text and minute >= self.start
                and (self.end is None or minute < self.end))


def values_text(values: list[float | None]) -> str:
    """promtool's expanding notation for `values`, one run per constant step (`a+bxn` is
    n + 1 values, `_xn` n absent ones), so that hours of 5 s scrapes stay a short line;
    a series that stops has a staleness marker first, as Prometheus writes one at the
    first scrape that lacks it (else it would linger for the 5 m lookback)."""
    runs: list[str] = []
    i = 0
    while i < len(values):
        if values[i] is None:
            j = i
            while j < len(values) and values[j] is None:
                j += 1
            # Prometheus marks a series stale at the first scrape without it.
            runs.append("stale" if i else "_")
            if j - i > 1:
                runs.append(f"_x{j - i - 1}")
            i = j
            continue
        first = values[i]
        assert first is not None
        j, step = i + 1, None
        while j < len(values) and values[j] is not None:
            d = values[j] - values[j - 1]  # type: ignore[operator]
            if step is not None and abs(d - step) > 1e-9:
                break
            step, j = d, j + 1
        step = step or 0.0
        if j - i == 1:
            runs.append(f"{first:.12g}")
        elif step == 0:
            runs.append(f"{first:.12g}x{j - i - 1}")
        else:
            runs.append(f"{first:.12g}{step:+.12g}x{j - i - 1}")
        i = j
    return " ".join(runs)


def engine_at(kv: float, running: float) -> tuple[float, int]:
    """An engine's saturation and its Instance's admission level at KV-cache usage `kv`
    with `running` requests and none waiting, as the Instance exporter computes them
    (EngineSample.saturation, admission.decide), so that no fleet states a pair of values
    the exporter cannot publish together."""
    sample = EngineSample(engine="vllm", running=running, waiting=0.0, kv_cache_usage=kv,
                          kv_cache_usage_max=kv, request_success=None, prompt_tokens=None,
                          generation_tokens=None)
    state = decide(AdmissionInputs(kv_cache_usage=kv, waiting=0.0, memory_free_ratio=0.75),
                   AdmissionThresholds(), draining=False)
    assert sample.saturation is not None
    return sample.saturation, ADMISSION_LEVELS[state.value]


@dataclass
class Fleet:
    """Input series of one fleet, scraped every STEP_S for `minutes`.

    Pool pa has an embedded Proxy and Instances a1, a2; pool pb has no Proxy-side
    source (its Instance b1 declares it). `busy` is whether requests flow; `gpus`
    whether the hosts have any; `idle_since_s` how long before the start the Proxy
    last dispatched (None: the Proxy restarted and has not dispatched since); `kv` the
    engines' KV-cache usage while busy, one value per KV_PHASE_S in turn (a busy engine's
    cache follows its batch); `queued` whether the Proxy's queues hold a request while
    busy. `faults` replaces one series' values whole; `changes` rewrites series over
    stretches of the run."""

    minutes: int
    busy: bool = True
    gpus: bool = True
    idle_since_s: float | None = 0.0
    kv: tuple[float, ...] = (0.2,)
    queued: bool = True
    faults: dict[str, str] = field(default_factory=dict)
    changes: list[Change] = field(default_factory=list)
    series: list[dict[str, str]] = field(default_factory=list)

    @property
    def steps(self) -> int:
        return self.minutes * 60 // STEP_S

    def add(self, name: str, labels: str, signal: Signal, counter: bool = False) -> None:
        """One series; a counter's `signal` is its increase per scrape."""
        text = f"{name}{{{labels}}}"
        if text in self.faults:
            self.series.append({"series": text, "values": self.faults[text]})
            return
        values: list[float | None] = []
        total = 0.0
        for step in range(self.steps + 1):
            change = next((c for c in reversed(self.changes) if c.covers(text, step)), None)
            value = signal(step) if change is None else change.value
            if counter and value is not None:
                total += value if step else 0.0
                value = total
            values.append(value)
        self.series.append({"series": text, "values": values_text(values)})

    def gauge(self, name: str, labels: str, value: float | Signal) -> None:
        self.add(name, labels, value if callable(value) else lambda _step: value)

    def counter(self, name: str, labels: str, per_step: float) -> None:
        self.add(name, labels, lambda _step: per_step, counter=True)

    def kv_at(self, step: int) -> float:
        return self.kv[int(step * STEP_S // KV_PHASE_S) % len(self.kv)] if self.busy else 0.0

    def build(self) -> list[dict[str, str]]:
        self.series.clear()
        self._prometheus_and_bridge()
        self._proxy("pa", ["a1", "a2"])
        for pool, instance in (("pa", "a1"), ("pa", "a2"), ("pb", "b1")):
            self._instance(pool, instance)
        return self.series

    def _prometheus_and_bridge(self) -> None:
        self.gauge("up", PROMETHEUS, 1)
        self.gauge("prometheus_rule_group_last_evaluation_timestamp_seconds",
                   f'{PROMETHEUS},rule_group="{RULE_GROUP}"', lambda step: step * STEP_S)
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
        self.counter("poolscope_proxy_instances_forgotten_total",
                     f'{target},source="proxy_registry"', 0)
        idle = self.idle_since_s is not None and not self.busy and self.idle_since_s > IDLE_S
        self.gauge("poolscope_proxy_pool_instances_idle", f'{target},source="proxy_dispatch"',
                   n if idle else 0)
        self.gauge("poolscope_proxy_pool_instances_idle_unknown",
                   f'{target},source="proxy_dispatch"', n if self.idle_since_s is None else 0)
        self.gauge("poolscope_proxy_pool_inflight_requests", f'{target},source="proxy_dispatch"',
                   4 if self.busy else 0)
        self.gauge("poolscope_proxy_pool_capacity_requests", f'{target},source="configured"', 16)
        self.counter("poolscope_proxy_requests_total",
                     f'{target},outcome="ok",source="proxy_dispatch"',
                     OK_PER_STEP if self.busy else 0)
        # The Proxy publishes every outcome, a measured 0 until one happens.
        for outcome in (o for o in OUTCOMES if o != "ok"):
            self.counter("poolscope_proxy_requests_total",
                         f'{target},outcome="{outcome}",source="proxy_dispatch"', 0)
        self.gauge("poolscope_proxy_collector_success",
                   f'{target},collector="proxy",source="exporter"', 1)
        for queue in ("prepare", "ready"):
            labels = f'{target},queue="{queue}"'
            self.gauge("poolscope_proxy_queue_depth", f'{labels},source="proxy_queue"',
                       1 if self.busy and self.queued else 0)
            self.gauge("poolscope_proxy_queue_capacity", f'{labels},source="configured"', 32)
            self.counter("poolscope_proxy_queue_rejections_total",
                         f'{labels},reason="full",source="proxy_queue"', 0)
        since = self.idle_since_s

        def idle_s(step: int) -> float:
            assert since is not None
            return 1 if self.busy else since + STEP_S * step

        for instance in instances:
            one = f'{target},instance_id="{instance}"'
            self.gauge("poolscope_proxy_instance_registered", f'{one},source="proxy_registry"', 1)
            self.gauge("poolscope_proxy_instance_alive", f'{one},source="proxy_registry"', 1)
            if since is not None:
                self.gauge("poolscope_proxy_instance_idle_seconds",
                           f'{one},source="proxy_dispatch"', idle_s)

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
        self.gauge("poolscope_engine_kv_cache_usage_ratio", engine, self.kv_at)
        self.gauge("poolscope_engine_kv_cache_usage_max_ratio", engine, self.kv_at)
        self.gauge("poolscope_engine_saturation_ratio", engine,
                   lambda step: engine_at(self.kv_at(step), running)[0])
        self.gauge("poolscope_engine_request_success_per_second", engine, 1 if self.busy else 0)
        self.gauge("poolscope_instance_capacity_requests", f'{target},source="configured"', 8)
        self.gauge("poolscope_instance_admission_level", f'{target},source="derived"',
                   lambda step: engine_at(self.kv_at(step), running)[1])
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


def promtool(tmp_path: Path, fleet: Fleet, name: str,
             checks: dict[str, list[dict[str, Any]]]) -> subprocess.CompletedProcess[str]:
    """promtool's verdict on `checks` (its alert_rule_test, promql_expr_test lists) over
    `fleet`, the recording rules and the alerts evaluated together."""
    spec = {
        "rule_files": [str(RECORDING), str(ALERTS)],
        "evaluation_interval": f"{STEP_S}s",
        "group_eval_order": eval_order(),
        "tests": [{"name": name, "interval": f"{STEP_S}s", "input_series": fleet.build(),
                   **checks}],
    }
    path = tmp_path / "fleet.yml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return subprocess.run([binary("promtool"), "test", "rules", str(path)],
                          capture_output=True, text=True, timeout=500, check=False)


def promtool_silence(tmp_path: Path, fleet: Fleet) -> subprocess.CompletedProcess[str]:
    return promtool(tmp_path, fleet, "no alert fires", {"alert_rule_test": [
        {"eval_time": t, "alertname": name,
         "exp_alerts": [WATCHDOG] if name == "PoolscopeWatchdog" else []}
        for t in eval_times(fleet) for name in alert_names()]})


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


# --- What an on-call meets: each fault class over hours -----------------------------------


@dataclass(frozen=True)
class Firing:
    """What an on-call sees at minute `at` of a fleet's run: exactly `alerts` firing
    besides the Watchdog, each as name -> (severity, the minute by which it became
    active). The second is how long it has fired: an alert that resolved and fired again
    is active since its second start, so a gap in a lasting fault fails the check."""

    at: int
    alerts: dict[str, tuple[str, int]] = field(default_factory=dict)


FIRING = 'ALERTS{alertstate="firing"}'


def firing_checks(firings: list[Firing]) -> list[dict[str, Any]]:
    """promtool cases for `firings`: the set firing, by name and severity (one per name,
    however many Instances or pools it fires for), then each one's start."""
    checks: list[dict[str, Any]] = []
    for firing in firings:
        expected = {"PoolscopeWatchdog": ("none", 0), **firing.alerts}
        checks.append({
            "expr": f"group by (alertname, severity) ({FIRING})",
            "eval_time": f"{firing.at}m",
            "exp_samples": [{"labels": f'{{alertname="{name}",severity="{severity}"}}',
                             "value": 1} for name, (severity, _) in sorted(expected.items())]})
        checks.extend({
            # ALERTS_FOR_STATE is when the alert became active, in the run's seconds.
            "expr": f'max by (alertname) (ALERTS_FOR_STATE{{alertname="{name}"}} '
                    f"and ignoring (alertstate) {FIRING}) < bool {(since + 1) * 60}",
            "eval_time": f"{firing.at}m",
            "exp_samples": [{"labels": f'{{alertname="{name}"}}', "value": 1}]}
            for name, (_, since) in sorted(expected.items()))
    return checks


def gone(text: str, start: float, end: float | None = None) -> Change:
    """Every series containing `text` absent from `start` (a target left discovery, a
    member forgotten, a collector failing)."""
    return Change(text, start, end, None)


A2 = 'job="poolscope-instance",instance="a2:10100",proxy_id="pa",instance_id="a2"'
MEMBERS = (A1, A2)
ONE_STEP_MIN = STEP_S / 60


def engines_loading(end: float) -> list[Change]:
    """Pool pa's Instances start at 0 and load their models until `end`: each Instance
    exporter answers, its engine collector fails (the engine's page does not answer yet:
    no engine series, no sample age, admission unknown), and the Proxy holds no member
    until the engine serves (a member registers once it can take requests)."""
    changes: list[Change] = []
    for member in MEMBERS:
        changes += [
            gone(f'{{{member},source="engine:vllm"}}', 0, end),
            Change(f'poolscope_collector_success{{{member},collector="engine"', 0, end, 0),
            gone(f'poolscope_collector_sample_age_seconds{{{member},collector="engine"', 0, end),
            Change(f"poolscope_instance_admission_level{{{member}", 0, end,
                   ADMISSION_LEVELS["unknown"])]
    return changes + [
        Change(f"poolscope_proxy_pool_instances_{name}{{{PA}", 0, end, 0)
        for name in ("registered", "alive", "stale")] + [
        gone(f"poolscope_proxy_instance_{name}{{{PA}", 0, end)
        for name in ("registered", "alive", "idle_seconds")] + [
        Change(f"poolscope_proxy_pool_inflight_requests{{{PA}", 0, end, 0),
        Change(f'poolscope_proxy_requests_total{{{PA},outcome="ok"', 0, end, 0),
        Change(f"poolscope_proxy_queue_depth{{{PA}", 0, end, 0)]


def pool_emptied(start: float, crashed: bool) -> list[Change]:
    """Pool pa loses both members at `start`. Deregistered (scaled to zero on purpose):
    the Proxy drops them at once and their exporters' targets leave discovery. Crashed:
    their hosts stop answering (targets down), the Proxy holds them registered but stale
    for FORGET_AFTER_S, then forgets them and counts it; every request meanwhile fails
    (the Proxy has no member to send it to)."""
    forget = start + FORGET_AFTER_S / 60 if crashed else start
    changes = [
        Change(f"poolscope_proxy_pool_instances_registered{{{PA}", forget, None, 0),
        Change(f"poolscope_proxy_pool_instances_alive{{{PA}", start, None, 0),
        Change(f"poolscope_proxy_pool_instances_stale{{{PA}", start, forget, len(MEMBERS)),
        Change(f"poolscope_proxy_instance_alive{{{PA}", start, None, 0),
        gone(f"poolscope_proxy_instance_registered{{{PA}", forget),
        gone(f"poolscope_proxy_instance_alive{{{PA}", forget),
        gone(f"poolscope_proxy_instance_idle_seconds{{{PA}", forget),
        Change(f"poolscope_proxy_pool_inflight_requests{{{PA}", start, None, 0),
        Change(f'poolscope_proxy_requests_total{{{PA},outcome="ok"', start, None, 0),
        Change(f"poolscope_proxy_queue_depth{{{PA}", start, None, 0)]
    if crashed:
        changes += [
            Change(f"poolscope_proxy_instances_forgotten_total{{{PA}", forget,
                   forget + ONE_STEP_MIN / 2, len(MEMBERS)),
            Change(f'poolscope_proxy_requests_total{{{PA},outcome="error"', start, None,
                   OK_PER_STEP)]
    for member in MEMBERS:
        changes.append(gone(f"{{{member}", start))
        if crashed:
            changes.append(Change(f"up{{{member}}}", start, None, 0))
    return changes


LOAD_MIN = int(ALERT_ENGINE_LOAD_S // 60)
# Scrapes of the fleet's rate in which the Proxy answers one request in a hundred with an
# error: past the slow burn's threshold (6 budgets), short of the fast burn's (14.4).
TRICKLE = OK_PER_STEP / 100
FAST_BURN = {"PoolscopeRequestErrorsFastBurn": ("critical", 2)}
SLOW_BURN = {"PoolscopeRequestErrorsSlowBurn": ("warning", 2)}
# What a pool whose every member crashed shows from minute 10 on, for hours.
DEAD = {"PoolscopePoolNoAliveMembers": ("critical", 11),
        "PoolscopeInstanceExporterDown": ("warning", 11),
        "PoolscopeRequestErrorsFastBurn": ("critical", 11)}
# Each fault class as an on-call meets it: the fleet, then what fires when. Times are
# minutes of the run; a fault starts at minute 10 unless the fleet starts with it. Each
# lasting fault is checked two hours on.
TIMELINES: dict[str, tuple[Fleet, list[Firing]]] = {
    # Busy engines whose KV cache runs 0.85..0.95 full for hours, every request answered
    # and none waiting: saturation is over 1 and admission degraded or saturated, which
    # is a full cache working, not a fault. Only the Watchdog.
    "KV-heavy but healthy": (
        Fleet(minutes=120, kv=(0.85, 0.9, 0.95, 0.9), queued=False),
        [Firing(at) for at in (15, 45, 90, 119)]),
    # A pool's engines load their models for 20 minutes, well within the engine
    # collector's window, then serve: nothing pages, during the load or after it.
    "cold start shorter than a model load": (
        Fleet(minutes=60, changes=engines_loading(20)),
        [Firing(at) for at in (5, 19, 25, 59)]),
    # The load lasts past ALERT_ENGINE_LOAD_S: the engine collector's warning fires from
    # then (active since the load began) until the engines serve; nothing else.
    "cold start past a model load": (
        Fleet(minutes=60, changes=engines_loading(LOAD_MIN + 15)),
        [Firing(LOAD_MIN - 1),
         *(Firing(at, {"PoolscopeCollectorFailing": ("warning", 0)})
           for at in (LOAD_MIN + 2, LOAD_MIN + 14)),
         Firing(LOAD_MIN + 20), Firing(59)]),
    # The Proxy's exporter leaves discovery while its pool's Instances keep answering:
    # its source is silent, which warns for as long as it lasts, hours on.
    "source vanished": (
        Fleet(minutes=130, changes=[gone(f"{{{PA}", 10)]),
        [Firing(9), *(Firing(at, {"PoolscopeProxySourceSilent": ("warning", 11)})
                      for at in (15, 60, 129))]),
    # Both members of pool pa crash: their hosts stop answering, the Proxy holds them
    # stale for FORGET_AFTER_S then forgets them, and every request fails meanwhile. It
    # pages (no member, and the failures), critical for as long as it lasts; the stale
    # members warn until the Proxy forgets them.
    "pool dead": (
        Fleet(minutes=130, changes=pool_emptied(10, crashed=True)),
        [Firing(9), Firing(13, DEAD),
         Firing(17, {**DEAD, "PoolscopePoolMembersStale": ("warning", 11)}),
         Firing(25, DEAD), *(Firing(at, {**DEAD, "PoolscopeRequestErrorsSlowBurn":
                                         ("warning", 11)}) for at in (60, 129))]),
    # An operator scales pool pa to zero: its members deregister and their targets leave
    # discovery. Its Proxy forgot no member, so nothing is remembered: the Watchdog alone,
    # for hours.
    "pool emptied on purpose": (
        Fleet(minutes=130, changes=pool_emptied(10, crashed=False)),
        [Firing(at) for at in (9, 13, 25, 60, 129)]),
    # One request in five fails from minute 1 for twenty minutes: the fast burn pages at
    # once and resolves within its short window of the errors' end; the slow burn's
    # ticket follows after its `for:` and resolves once its short window has passed.
    "errors, a burst": (
        Fleet(minutes=75, faults={
            f'poolscope_proxy_requests_total{{{PA},outcome="error",source="proxy_dispatch"}}':
            ERRORS_20M}),
        [Firing(5, FAST_BURN), Firing(15, FAST_BURN), Firing(25, {**FAST_BURN, **SLOW_BURN}),
         Firing(30, SLOW_BURN), Firing(45, SLOW_BURN), Firing(60), Firing(74)]),
    # One request in a hundred fails from minute 10 on: the slow burn's ticket, for hours,
    # and never a page. It is active once the trickle fills enough of the 30 m short window
    # to pass 6 budgets (about 18 minutes of it), and fires its `for:` later.
    "errors, a trickle": (
        Fleet(minutes=120, changes=[Change(
            f'poolscope_proxy_requests_total{{{PA},outcome="error"', 10, None, TRICKLE)]),
        [Firing(20), Firing(40),
         *(Firing(at, {"PoolscopeRequestErrorsSlowBurn": ("warning", 28)})
           for at in (50, 80, 119))]),
}


@pytest.mark.parametrize("name", TIMELINES)
def test_an_on_call_meets_each_fault_class_as_it_should(tmp_path: Path, name: str) -> None:
    """Each fault class run for hours through the recording rules and the alerts: the
    exact alerts firing, their severity and how long they have fired, at each check."""
    fleet, firings = TIMELINES[name]
    done = promtool(tmp_path, fleet, name, {"promql_expr_test": firing_checks(firings)})
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr
