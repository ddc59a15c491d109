"""Faults at the Instance level, injected into a real stack: demo Proxies, simulated
engines, Instance exporters, a real Prometheus with the project's rules (1 s scrape
and evaluation), and the Scheduler bridge. Each fault must show as a fault — absent
series, a success gauge at 0, an error reason — and never as a healthy zero.

One stack serves every test; each test owns its own pool, so the faults do not mix:
  p-kill    3 Instances; one exporter is SIGKILLed
  p-engine  4 Instances; their engines hang, answer 500, answer garbage
  p-gpu     1 Instance, exporter in this process over a fake NVML with 2 GPUs
  p-skew    2 Instances, exporters in this process with wall clocks an hour ahead
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from harness.fake_gpus import FakeGpu, FakeNvml
from harness.polling import eventually
from harness.prometheus import Prometheus, running_prometheus, scrape_config
from poolscope.contract.fields import FIELDS
from poolscope.exporters.instance.service import InstanceExporter, Settings
from tests.reliability.stack import (
    InProcessExporter,
    Launcher,
    Pool,
    ThreadedLoop,
    fetch_json,
    scalar,
    vector,
)
from tests.support.rules import fresh_threshold_s

pytestmark = pytest.mark.integration

FRESH_S = fresh_threshold_s()  # the rules: a host sample is fresh this long
# The contract's bound: the freshness threshold, plus one scrape, one evaluation
# and one bridge cache TTL (1 + 1 + 0.5 s), plus slack for a busy machine: one slow
# scrape drops a series for an evaluation, and the rule groups (counts, freshness)
# are evaluated apart, so the waits below need both to agree at one read.
STALE_BOUND_S = FRESH_S + 15
# A fault that does not wait on a threshold: a couple of scrapes and evaluations.
SHORT_BOUND_S = 10
SKEW_S = 3600.0
GIB = 2**30
# Pools whose rate()-based rollups do not exist yet although their inputs do.
RATES_PENDING = """
  group by (proxy_id) (poolscope_proxy_requests_total)
    unless on (proxy_id) proxy_pool:requests:rate1m
or
  group by (proxy_id) (poolscope_host_network_receive_bytes_total)
    unless on (proxy_id) (proxy_pool:network_receive_bytes:rate1m
                          and on (proxy_id) proxy_pool:network_transmit_bytes:rate1m)
"""


@dataclass
class Stack:
    prom: Prometheus
    bridge: str
    pools: dict[str, Pool]
    nvml: FakeNvml
    in_process: dict[str, InProcessExporter]

    def summary(self, proxy_id: str) -> dict[str, Any]:
        status, body = fetch_json(f"{self.bridge}/v1/pool_resources/{proxy_id}")
        assert status == 200, body
        return body


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("faults")
    launcher, loop = Launcher(workdir), ThreadedLoop()
    in_process: dict[str, InProcessExporter] = {}
    try:
        pools = {pid: launcher.pool(pid) for pid in ("p-kill", "p-engine", "p-gpu", "p-skew")}
        launcher.wait()
        for i in (1, 2, 3):
            launcher.instance(pools["p-kill"], f"k{i}")
        for i in (1, 2, 3, 4):
            launcher.instance(pools["p-engine"], f"e{i}")
        for pid, iid in (("p-gpu", "g1"), ("p-skew", "s1"), ("p-skew", "s2")):
            launcher.engine(pools[pid], iid)
        launcher.wait()
        nvml = FakeNvml([FakeGpu("GPU-good", "NVIDIA H100", util=40, used=10 * GIB),
                         FakeGpu("GPU-bad", "NVIDIA H100", util=70, used=30 * GIB)])

        def exporter(pid: str, iid: str, **kwargs: Any) -> InProcessExporter:
            settings = Settings(instance_id=iid, proxy_id=pid, engine="vllm",
                                engine_metrics_url=f"{pools[pid].engines[iid]}/metrics")
            made = InProcessExporter(InstanceExporter(settings, **kwargs), loop)
            in_process[iid] = made
            pools[pid].targets[iid] = made.target
            return made

        exporter("p-gpu", "g1", nvml=nvml.module())
        for iid in ("s1", "s2"):
            exporter("p-skew", iid, wall=lambda: time.time() + SKEW_S)
        jobs = [scrape_config("instances", [t for p in pools.values() for t in p.targets.values()]),
                scrape_config("proxies", [p.proxy_url.removeprefix("http://")
                                          for p in pools.values()])]
        with running_prometheus(workdir / "prometheus", jobs) as prom:
            bridge = launcher.scheduler_bridge("scheduler-bridge", [prom.url])
            launcher.wait()
            expected = {"p-kill": 3, "p-engine": 4, "p-gpu": 1, "p-skew": 2}
            eventually(lambda: vector(prom, "proxy_pool:instances_with_resource:count",
                                      by="proxy_id"),
                       lambda v: v == expected, 60, "every Instance fresh")
            # rate()-based fields need two scrapes; before that they are rightly null,
            # and a test comparing before and after a fault must not start earlier.
            eventually(lambda: prom.query(RATES_PENDING), lambda v: v == [], 90,
                       "every pool's rate()-based rollups")
            yield Stack(prom, bridge, pools, nvml, in_process)
    finally:
        for made in in_process.values():
            made.close()
        loop.close()
        launcher.stop()


def fields_of(summary: dict[str, Any]) -> dict[str, Any]:
    section_key = (f.path.split(".", 1) for f in FIELDS)
    return {f"{s}.{k}": summary[s][k] for s, k in section_key}


def nulls(summary: dict[str, Any]) -> set[str]:
    return {path for path, v in fields_of(summary).items() if v is None}


# Null by contract on a host without GPUs (every pool here but p-gpu).
GPU_FIELDS = {f.path for f in FIELDS if "gpu" in f.rollup}


def rollup_and_inputs(prom: Prometheus, rollup: str,
                      raw: str) -> tuple[float, list[tuple[float, int]]]:
    """The rollup at the timestamp Prometheus stored it with, and the sum and count of
    its inputs as that evaluation may have seen them (see `cutoffs_seen_at`)."""
    at = scalar(prom, f"timestamp({rollup})")
    assert at is not None, f"{rollup} is absent"
    [rolled] = prom.query(rollup, at=at)
    seen = []
    for cutoff in prom.cutoffs_seen_at(at, [raw]):
        [total] = prom.query(f"sum({raw})", at=cutoff)
        [count] = prom.query(f"count({raw})", at=cutoff)
        seen.append((float(total["value"][1]), int(float(count["value"][1]))))
    return float(rolled["value"][1]), seen


# --- an exporter killed mid-run ----------------------------------------------

def test_killed_exporter_goes_missing_leaves_averages_and_fakes_no_zero(stack: Stack) -> None:
    prom, pool = stack.prom, stack.pools["p-kill"]
    # The baseline: all three with a fresh host sample, every field but the GPU ones
    # measured. (One slow scrape drops an exporter, or the Proxy, from an evaluation.)
    before = eventually(lambda: stack.summary("p-kill"),
                        lambda s: s["instances"]["with_resource"] == 3
                        and s["instances"]["missing_resource"] == 0
                        and nulls(s) <= GPU_FIELDS, SHORT_BOUND_S,
                        "all three Instances with a fresh host sample before the kill")
    # No GPU on this host, so the pool is already "partial" (GPU fields null); the
    # kill shows in the counts, and the quality must not get better or go missing.
    assert scalar(prom, 'proxy_pool:data_quality{proxy_id="p-kill",quality="partial"}') == 1

    victim = pool.exporters["k3"].process
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()

    # The engine still heartbeats: alive, no data. One dead exporter of three nulls
    # only the pool's freshness (a member's age is unknown, not small), no other field.
    # (The counts are rolled up rule by rule, the other fields in other groups, and a
    # survivor's or the Proxy's slow scrape nulls a field for an evaluation: wait for
    # one summary where all of it holds. A field the kill nulls for good fails every
    # read.)
    expected = {"total": 3, "alive": 3, "stale": 0, "with_resource": 2, "missing_resource": 1,
                "idle": None, "idle_unknown": None, "asleep": 0}
    freshness = {"health.resource_freshness_s_avg", "health.resource_freshness_s_max"}
    after = eventually(lambda: stack.summary("p-kill"),
                       lambda s: s["instances"] | {"idle": None, "idle_unknown": None}
                       == expected and nulls(s) == nulls(before) | freshness, STALE_BOUND_S,
                       "killed exporter leaves instances.with_resource, nulls only freshness")
    assert after["health"]["data_quality"] == "partial"
    assert scalar(prom, 'proxy_pool:data_quality{proxy_id="p-kill",quality="partial"}') == 1
    # The missed scrape marks the dead target's series stale at once (with its up 0).
    victim_target = pool.targets["k3"]
    eventually(lambda: prom.targets_up().get(victim_target), lambda up: up == 0,
               SHORT_BOUND_S, "the killed exporter's target is down")
    n = 'poolscope_host_cpu_utilization_ratio{proxy_id="p-kill"}'
    assert "k3" not in vector(prom, n)
    # The averages are over the two survivors only, at the very evaluation time.
    # (The rollup stored just before the exporter's series went stale may still count
    # three, and a survivor's slow scrape may leave one: retry over later evaluations.
    # A rollup that does not average its inputs fails every one.)
    eventually(
        lambda: rollup_and_inputs(
            prom, 'proxy_pool:cpu_utilization:avg{proxy_id="p-kill"}', n),
        lambda t: all(count == 2 for _, count in t[1])
        and any(t[0] == pytest.approx(total / count) for total, count in t[1]),
        SHORT_BOUND_S, "an evaluation over the two survivors averaging their CPU")
    # Nothing the kill touched became a zero: known values stay or turn null. (Not
    # the network rates: every exporter here reads this host's NICs, whose traffic
    # may really stop for the minute in between.)
    fabricated = {path: (before_v, fields_of(after)[path])
                  for path, before_v in fields_of(before).items()
                  if fields_of(after)[path] == 0 and before_v != 0
                  and not path.startswith("utilization.network_")}
    assert fabricated == {}


# --- an engine that hangs, answers 500 or answers garbage ----------------------

FAULTS = {"e1": ("hang", "timeout"), "e2": ("error500", "http_status"),
          "e3": ("garbage", "parse")}


def set_fault(engine_url: str, mode: str) -> None:
    request = urllib.request.Request(f"{engine_url}/admin/fault",
                                     data=json.dumps({"mode": mode}).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as r:
        assert json.load(r)["mode"] == mode


def engine_errors(prom: Prometheus) -> dict[tuple[str, str], float]:
    return {(s["metric"]["instance_id"], s["metric"]["reason"]): float(s["value"][1])
            for s in prom.query('poolscope_collector_errors_total'
                                '{proxy_id="p-engine",collector="engine"}')}


def test_broken_engines_lose_engine_fields_with_a_reason_and_keep_host_fields(
        stack: Stack) -> None:
    prom, engines = stack.prom, stack.pools["p-engine"].engines
    # The counters exist before any fault (a measured count, not absent). They are
    # compared as deltas: on a busy machine a healthy engine's read can time out.
    # (Polled: an exporter's slow scrape drops its series from a read.)
    before = eventually(lambda: engine_errors(prom),
                        lambda v: {i for i, _r in v} >= set(FAULTS), SHORT_BOUND_S,
                        "engine error counters of the Instances to break")
    try:
        for iid, (mode, _reason) in FAULTS.items():
            set_fault(engines[iid], mode)
        eventually(lambda: vector(prom, 'poolscope_collector_success'
                                        '{proxy_id="p-engine",collector="engine"}'),
                   lambda v: v == {"e1": 0, "e2": 0, "e3": 0, "e4": 1}, SHORT_BOUND_S,
                   "engine collector success per Instance")

        def counted(errors: dict[tuple[str, str], float]) -> dict[str, set[str]]:
            return {iid: {r for (i, r), v in errors.items()
                          if i == iid and v > before.get((i, r), 0)} for iid in FAULTS}

        # Each broken engine counted under its reason (polled: a later scrape of its
        # exporter may be slow; a wrong reason fails every read).
        eventually(lambda: counted(engine_errors(prom)),
                   lambda c: all(reason in c[iid] for iid, (_m, reason) in FAULTS.items()),
                   SHORT_BOUND_S, "each broken engine's error reason counted")
        # e4's own read can time out on a busy machine and drop it from one scrape.
        eventually(lambda: vector(prom, 'poolscope_engine_requests_running{proxy_id="p-engine"}'),
                   lambda v: v.keys() == {"e4"}, SHORT_BOUND_S, "only e4 reports engine load")
        # The pool's engine fields now stand on e4 alone; host fields on all four.
        for rollup, raw in (
                ("proxy_pool:engine_requests_running:sum", "poolscope_engine_requests_running"),
                ("proxy_pool:kv_cache_usage:avg", "poolscope_engine_kv_cache_usage_ratio")):
            rolled, seen = eventually(
                lambda r=rollup, w=raw: rollup_and_inputs(  # type: ignore[misc]
                    prom, f'{r}{{proxy_id="p-engine"}}', f'{w}{{proxy_id="p-engine"}}'),
                lambda t: all(count == 1 for _, count in t[1]), SHORT_BOUND_S,
                f"{rollup} over the healthy engine")
            assert any(rolled == pytest.approx(total) for total, _ in seen), (rolled, seen)
        # Broken engines leave the host side alone (a slow scrape may drop one
        # exporter for an evaluation, so wait for a summary with all four).
        eventually(lambda: stack.summary("p-engine"),
                   lambda s: s["instances"]["with_resource"] == 4
                   and s["utilization"]["cpu_avg"] is not None, SHORT_BOUND_S,
                   "host fields of all four Instances while their engines fail")

        set_fault(engines["e4"], "garbage")  # now no engine answers sanely
        # Each engine field is its own rule (two groups), so one summary may still
        # carry one of them: wait for all four null, the host fields kept.
        eventually(lambda: stack.summary("p-engine"),
                   lambda s: s["load"]["engine_running_total"] is None
                   and s["load"]["engine_waiting_total"] is None
                   and s["utilization"]["kv_cache_usage_avg"] is None
                   and s["utilization"]["kv_cache_usage_max"] is None
                   and s["utilization"]["cpu_avg"] is not None
                   and s["instances"]["with_resource"] == 4,
                   SHORT_BOUND_S,
                   "engine fields null once every engine is broken, host fields kept")
    finally:
        for url in engines.values():
            set_fault(url, "none")


# --- a GPU whose NVML reads start failing --------------------------------------

def gpu_counts(prom: Prometheus) -> dict[str, float]:
    return vector(prom, 'proxy_pool:gpus:count{proxy_id="p-gpu"}', by="health")


def test_failing_gpu_is_unhealthy_and_neither_used_nor_free(stack: Stack) -> None:
    prom = stack.prom
    eventually(lambda: gpu_counts(prom), lambda v: v == {"healthy": 2, "unhealthy": 0},
               SHORT_BOUND_S, "both GPUs healthy")
    # (Polled, like every read below: this exporter runs in the test's own process,
    # and one slow scrape drops its series from an evaluation.)
    eventually(lambda: scalar(prom, 'proxy_pool:gpu_memory_used:ratio{proxy_id="p-gpu"}'),
               lambda v: v == pytest.approx(40 / 160), SHORT_BOUND_S,
               "memory ratio over both GPUs")
    stack.nvml.failing.add(1)
    try:
        eventually(lambda: gpu_counts(prom), lambda v: v == {"healthy": 1, "unhealthy": 1},
                   SHORT_BOUND_S, "the failing GPU counted unhealthy")
        # The failing GPU keeps its identity labels, and serves no usage.
        eventually(lambda: vector(prom, 'poolscope_gpu_healthy{proxy_id="p-gpu"}', by="gpu_uuid"),
                   lambda v: v == {"GPU-good": 1, "GPU-bad": 0}, SHORT_BOUND_S,
                   "per-GPU health while failing")
        for usage in ("utilization_ratio", "memory_used_bytes", "memory_total_bytes"):
            eventually(lambda u=usage: vector(  # type: ignore[misc]
                           prom, f'poolscope_gpu_{u}{{proxy_id="p-gpu"}}', by="gpu_uuid"),
                       lambda v: v.keys() == {"GPU-good"}, SHORT_BOUND_S,
                       f"poolscope_gpu_{usage} of the healthy GPU only")
        eventually(lambda: scalar(prom, 'proxy_pool:gpu_memory_used:ratio{proxy_id="p-gpu"}'),
                   lambda v: v == pytest.approx(10 / 80), SHORT_BOUND_S,
                   "memory ratio over the healthy GPU only")
        # The failing GPU's memory is not free capacity. (Polled: Prometheus commits
        # each rule of a group on its own, so the ratio can move before the total.)
        eventually(lambda: scalar(prom, 'proxy_pool:gpu_memory_total_bytes:sum{proxy_id="p-gpu"}'),
                   lambda v: v == 80 * GIB, SHORT_BOUND_S, "memory total of the healthy GPU")
        eventually(lambda: vector(prom, 'poolscope_collector_errors_total'
                                        '{proxy_id="p-gpu",collector="gpu"}', by="reason"),
                   lambda v: v.get("nvml_read", 0) >= 1, SHORT_BOUND_S,
                   "the failing reads counted as nvml_read")
        # Each GPU field is its own rule: wait for one summary with all three.
        eventually(lambda: stack.summary("p-gpu")["utilization"],
                   lambda u: u["gpu_util_max"] == pytest.approx(40)
                   and u["gpu_util_avg"] == pytest.approx(40)
                   and u["gpu_mem_used_ratio"] == pytest.approx(0.125),
                   SHORT_BOUND_S, "bridge GPU fields over the healthy GPU")
    finally:
        stack.nvml.failing.discard(1)


# --- clock skew ---------------------------------------------------------------

def host_clock_lead(prom: Prometheus, iid: str) -> float:
    """How far ahead of this machine the exporter's wall clock says its sample was."""
    # Absent for an evaluation after one slow scrape: wait for it to be scraped.
    last = eventually(lambda: scalar(prom, 'poolscope_collector_last_success_timestamp_seconds'
                                           f'{{instance_id="{iid}",collector="host"}}'),
                      lambda v: v is not None, SHORT_BOUND_S, f"{iid}'s last host success")
    assert last is not None
    return last - time.time()


# Each Instance's host sample age, as the rollups compute it (the exporter's monotonic
# age plus the age of Prometheus' scrape).
AGE = 'poolscope_collector_sample_age_seconds{collector="host",proxy_id="p-skew"}'
FRESHNESS = f"max by (instance_id) ({AGE} + (time() - timestamp({AGE})))"


def test_skewed_host_clock_does_not_change_freshness(stack: Stack) -> None:
    prom = stack.prom
    assert host_clock_lead(prom, "s1") > SKEW_S - 60  # the host says it is an hour ahead
    # A slow scrape drops an exporter's series for a moment; a clock-based age
    # (an hour off) fails every read.
    eventually(lambda: vector(prom, FRESHNESS),
               lambda v: v.keys() == {"s1", "s2"}
               and all(0 <= age < FRESH_S for age in v.values()), SHORT_BOUND_S,
               "both skewed Instances' host samples fresh")
    eventually(lambda: stack.summary("p-skew"),
               lambda s: s["instances"]["with_resource"] == 2
               and s["health"]["resource_freshness_s_max"] is not None
               and 0 <= s["health"]["resource_freshness_s_max"] < FRESH_S, SHORT_BOUND_S,
               "the skewed pool fresh in the bridge")


def test_stalled_exporter_cannot_look_fresh_whatever_its_clock_says(stack: Stack) -> None:
    prom = stack.prom
    stack.in_process["s2"].stall_sampling()  # still serves, samples nothing new
    # The freshness rollup lives in another rule group than the counts, so one
    # summary may mix evaluations: wait for one where both show the stall.
    eventually(lambda: stack.summary("p-skew"),
               lambda s: s["instances"]["missing_resource"] == 1
               and s["instances"]["with_resource"] == 1
               and s["health"]["resource_freshness_s_max"] is not None
               and s["health"]["resource_freshness_s_max"] > FRESH_S, STALE_BOUND_S,
               "a stalled sampler turns missing, pool freshness past the threshold")
    # Its clock still puts its last sample in the future; freshness did not care.
    assert host_clock_lead(prom, "s2") > SKEW_S - 60 - STALE_BOUND_S
    eventually(lambda: vector(prom, FRESHNESS), lambda v: v.get("s2", 0) > FRESH_S,
               SHORT_BOUND_S, "the stalled Instance's host sample age past the threshold")
