"""The soak itself: start the fleet and its monitoring, churn it on a schedule while
sampling every component, and judge the samples.

Everything is started as deployed and on loopback: demo Proxies embedding the Proxy
library, simulated engines behind real Instance exporters, llama.cpp's router behind
per-model exporters, a real Prometheus running rules/ over file_sd targets that follow
the fleet, the Scheduler bridge and a Proxy bridge per long-lived pool, and open-loop
load on the long-lived pools so that the Proxies keep dispatch statistics per member.
Time is compressed by flags: the Proxies' heartbeat timeout and forget bound, the
rollout and pool periods, and Prometheus' block length (its head keeps every series
until the head is compacted, 1.5 blocks, so 2 h blocks would hold an hour's churn).
"""

from __future__ import annotations

import json
import math
import random
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.backfill import duration_s
from bench.churn.fleet import ChurnFleet, MemberFlags
from bench.churn.models import RouterModels
from bench.churn.probe import ANSWER, FORGOTTEN, HEAD_SERIES, Sample, Watched, sample
from bench.churn.verdict import (
    FLEET,
    MEMBERS_ALIVE,
    MEMBERS_EVER,
    POOLS_ALIVE,
    POOLS_EVER,
    Verdict,
    judge,
)
from deploy.demo.cluster import prometheus_config, start_proxy_bridges
from deploy.demo.processes import Child, ProcessGroup, port_or_free, wait_ready
from harness.stacks import start_prometheus
from poolscope.contract.thresholds import MEMBER_MEMORY

CHURN_POOL_INSTANCES = 2  # members of each short-lived pool
MEMBER_MEMORY_S = duration_s(MEMBER_MEMORY)


@dataclass(frozen=True)
class Settings:
    duration_s: float = 600.0
    rollout_period_s: float = 60.0  # each long-lived member is replaced once per period
    crashes: int = 6
    pool_churn_period_s: float = 90.0  # a short-lived pool is replaced once per period
    sample_period_s: float = 5.0
    heartbeat_timeout_s: float = 3.0
    forget_after_s: float = 20.0
    interval_s: float = 1.0  # Prometheus' scrape and evaluation interval
    tsdb_block_s: float = 60.0
    pools: int = 2
    instances: int = 3  # per long-lived pool
    router_models: int = 2
    model_period_s: float = 45.0
    rate: float = 2.0  # requests per second to each long-lived pool
    bound: float = 1.5
    seed: int = 1

    @property
    def settle_s(self) -> float:
        """The longest memory the fleet's churn may legitimately fill before it is flat:
        a crashed member is stale for the heartbeat timeout, then kept until forgotten;
        Prometheus' head keeps a series that ended until the head is compacted past it,
        up to two blocks later (a compaction starts once the head spans 1.5 blocks)."""
        return max(self.heartbeat_timeout_s + self.forget_after_s, 2 * self.tsdb_block_s)

    def crash_times(self) -> list[float]:
        """Spread over the run, the last one early enough to be forgotten before the end
        (the forgotten count then equals the crashes)."""
        span = self.duration_s - self.heartbeat_timeout_s - self.forget_after_s \
            - 2 * self.sample_period_s
        return [span * (k + 1) / (self.crashes + 1) for k in range(self.crashes)]


@dataclass
class Result:
    settings: Settings
    samples: list[Sample]
    verdict: Verdict
    first_rollout_s: float | None  # when every member started with the fleet was replaced
    events: dict[str, int]  # how many of each change happened
    crashed: list[str]
    forgotten: dict[str, float]  # long-lived Proxy -> its forgotten counter at the end
    listed: dict[str, int]  # long-lived Proxy -> members it lists (dead ones too) at the end
    alive: dict[str, int]  # long-lived pool -> its members alive at the end

    def as_json(self) -> dict[str, object]:
        v = self.verdict
        return {
            "passed": v.passed, "bound": v.bound, "windows": asdict(v.windows),
            "first_rollout_s": self.first_rollout_s, "events": self.events,
            "crashed": self.crashed, "forgotten": self.forgotten, "listed": self.listed,
            "alive": self.alive,
            "fleet": [asdict(f) for f in v.fleet],
            # A figure missing from a window has no ratio (JSON has no infinity).
            "figures": [{**asdict(f), "judged": f.judged,
                         "ratio": f.ratio if math.isfinite(f.ratio) else None}
                        for f in v.figures],
            "settings": vars(self.settings),
        }


def pool_ids(count: int) -> list[str]:
    return [f"pool-{k + 1}" for k in range(count)]


def run(settings: Settings, workdir: Path, log: Callable[[str], None] = print) -> Result:
    """The whole soak in `workdir` (logs, Prometheus data, file_sd); stops everything it
    started before returning."""
    (workdir / "logs").mkdir(parents=True, exist_ok=True)
    group = ProcessGroup(workdir / "logs")
    try:
        return _Soak(settings, workdir, group, log).run()
    finally:
        group.stop()


class _Soak:
    def __init__(self, settings: Settings, workdir: Path, group: ProcessGroup,
                 log: Callable[[str], None]) -> None:
        self.s = settings
        self.group = group
        self.log = log
        self.rng = random.Random(settings.seed)
        self.models = (RouterModels(group, workdir, settings.router_models)
                       if settings.router_models else None)
        flags = MemberFlags(
            proxy=("--heartbeat-timeout", f"{settings.heartbeat_timeout_s:g}",
                   "--forget-after", f"{settings.forget_after_s:g}"),
            engine=("--heartbeat-interval", f"{settings.heartbeat_timeout_s / 3:g}"))
        self.fleet = ChurnFleet(group, workdir, flags,
                                [self.models.pool()] if self.models else [])
        self.long_lived = pool_ids(settings.pools)
        for proxy_id in self.long_lived:
            self.fleet.create_pool(proxy_id, settings.instances)
        self.initial_serials = settings.pools * settings.instances
        self.prom_url, self.prom, self.sched_url, self.sched = self._monitoring(workdir)
        bridged = start_proxy_bridges(
            group, [self.fleet.pools[p].as_demo_pool() for p in self.long_lived],
            self.prom_url, 0, ("--evaluation-interval", f"{settings.interval_s:g}"))
        self.bridges = {p.proxy_id: (p.bridge_url, self._child(f"proxy-bridge-{p.proxy_id}"))
                        for p in bridged}
        group.start_python("loadgen", "deploy.demo.loadgen", "--seed", str(settings.seed),
                           "--duration", f"{settings.duration_s + 60:g}",
                           *(a for p in self.long_lived for a in (
                               "--target", f"{self.fleet.pools[p].proxy_url}={settings.rate:g}")))
        self.events: dict[str, int] = {}
        self.churn_serial = 0

    def _child(self, name: str) -> Child:
        return next(c for c in self.group.children if c.name == name)

    def _monitoring(self, workdir: Path) -> tuple[str, Child, str, Child]:
        """Prometheus over the fleet's targets with the real rules, blocks as short as
        the compressed time asks; the Scheduler bridge over it, scraped by it."""
        interval = f"{self.s.interval_s:g}"
        sched_port = port_or_free(0)
        config = prometheus_config(
            workdir, self.s.interval_s,
            [*(p.as_demo_pool() for p in self.fleet.pools.values()), *self.fleet.static],
            {"poolscope-scheduler-bridge": f"127.0.0.1:{sched_port}"})
        # The larger blocks Prometheus compacts the first ones into follow from it, as
        # deployed: each holds files open, so without them its descriptors would grow
        # with the blocks, one per --tsdb-block.
        prom_url, prom = start_prometheus(
            self.group, "prometheus", config, workdir / "prometheus-data",
            f"--storage.tsdb.min-block-duration={self.s.tsdb_block_s:g}s")
        sched_url = f"http://127.0.0.1:{sched_port}"
        sched = self.group.start_python(
            "scheduler-bridge", "poolscope.scheduler_bridge", "--prometheus-url", prom_url,
            "--evaluation-interval", interval, "--listen", f"127.0.0.1:{sched_port}",
            "--log.level", "warning")
        wait_ready(f"{sched_url}/healthz", sched)
        return prom_url, prom, sched_url, sched

    def watched(self) -> dict[str, list[Watched]]:
        """Every component to sample now: the members' exporters as they are now."""
        components = {
            "prometheus": [Watched(self.prom.process.pid, f"{self.prom_url}/metrics",
                                   values=(HEAD_SERIES,))],
            "scheduler-bridge": [Watched(self.sched.process.pid, f"{self.sched_url}/metrics",
                                         f"{self.sched_url}/debug/proxy_pool_resources")],
        }
        for proxy_id in self.long_lived:
            pool = self.fleet.pools[proxy_id]
            components[f"proxy-{proxy_id}"] = [Watched(pool.proxy.process.pid,
                                                       f"{pool.proxy_url}/metrics",
                                                       values=(FORGOTTEN,))]
            url, bridge = self.bridges[proxy_id]
            components[f"proxy-bridge-{proxy_id}"] = [Watched(
                bridge.process.pid, f"{url}/metrics",
                f"{url}/debug/pool_resource?detail=local")]
        components["instance-exporters"] = [
            Watched(m.exporter.process.pid, f"{m.exporter_url}/metrics")
            for pool in self.fleet.pools.values() for m in pool.members]
        if self.models is not None:
            components["model-exporters"] = [
                Watched(r.exporter.process.pid, f"{r.exporter_url}/metrics")
                for r in self.models.readers]
        return components

    def fleet_samples(self, t_s: float) -> list[Sample]:
        counts = {MEMBERS_EVER: self.fleet.members_ever, MEMBERS_ALIVE: self.fleet.members_alive,
                  POOLS_EVER: self.fleet.pools_ever, POOLS_ALIVE: len(self.fleet.pools)}
        return [Sample(t_s, FLEET, name, value) for name, value in counts.items()]

    def run(self) -> Result:
        s = self.s
        periods = {"rollout": s.rollout_period_s / (s.pools * s.instances),
                   "pool": s.pool_churn_period_s, "sample": s.sample_period_s}
        if self.models is not None:
            periods["model"] = s.model_period_s
        # The first short-lived pool and the first sample come at once.
        due = {**periods, "pool": 0.0, "sample": 0.0}
        crash_times = s.crash_times()
        due["crash"] = crash_times.pop(0) if crash_times else float("inf")
        samples: list[Sample] = []
        first_rollout_s: float | None = None
        start = time.monotonic()
        self.log(f"churn soak: fleet up; {s.duration_s:g} s of churn begins")
        while True:
            event = min(due, key=due.__getitem__)
            if due[event] >= s.duration_s:
                break
            time.sleep(max(0.0, start + due[event] - time.monotonic()))
            if event == "sample":
                t_s = time.monotonic() - start
                samples += sample(t_s, self.watched()) + self.fleet_samples(t_s)
            else:
                self.change(event)
                self.events[event] = self.events.get(event, 0) + 1
            if event == "crash":
                due["crash"] = crash_times.pop(0) if crash_times else float("inf")
            else:
                due[event] += periods[event]
            if first_rollout_s is None and self.rolled_over():
                first_rollout_s = time.monotonic() - start
                self.log(f"churn soak: first full rollout done at {first_rollout_s:.0f} s")
        settled = max(first_rollout_s or s.duration_s, s.settle_s)
        verdict = judge(samples, settled, s.duration_s, s.bound, self.memory_s)
        last = {(x.component, x.figure): x.value for x in samples}
        return Result(
            s, samples, verdict, first_rollout_s, self.events, list(self.fleet.crashed),
            {p: last.get((f"proxy-{p}", FORGOTTEN), 0.0) for p in self.long_lived},
            {p: self.listed(p) for p in self.long_lived},
            {p: len(self.fleet.pools[p].members) for p in self.long_lived})

    def memory_s(self, component: str, figure: str) -> float:
        """When a figure's own fixed memory has filled: the Proxy bridge's answer lists
        every member that answered within MEMBER_MEMORY (rules and bridges share that
        window; no flag compresses it), so it is full that long after the first member
        left, one rollout step in."""
        if component.startswith("proxy-bridge-") and figure == ANSWER:
            return MEMBER_MEMORY_S + self.s.rollout_period_s / (self.s.pools * self.s.instances)
        return 0.0

    def rolled_over(self) -> bool:
        return all(m.serial > self.initial_serials
                   for p in self.long_lived for m in self.fleet.pools[p].members)

    def change(self, event: str) -> None:
        if event == "rollout":
            self.fleet.replace_oldest(self.long_lived)
        elif event == "crash":
            proxy_id = self.rng.choice(self.long_lived)
            index = self.rng.randrange(len(self.fleet.pools[proxy_id].members))
            self.log(f"churn soak: crashed {self.fleet.crash(proxy_id, index)}")
        elif event == "pool":
            for proxy_id in [p for p in self.fleet.pools if p not in self.long_lived]:
                self.fleet.delete_pool(proxy_id)
            self.churn_serial += 1
            self.fleet.create_pool(f"churn-{self.churn_serial}", CHURN_POOL_INSTANCES)
        elif event == "model" and self.models is not None:
            self.log(f"churn soak: {self.models.toggle()}")

    def listed(self, proxy_id: str) -> int:
        url = f"{self.fleet.pools[proxy_id].proxy_url}/v1/instance/list?include_dead=true"
        with urllib.request.urlopen(url, timeout=5) as answer:
            return len(json.load(answer)["instances"])
