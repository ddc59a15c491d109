"""What a simulated scenario offers, drawn from its seed before any policy runs.

Every policy of a scenario must meet exactly the same requests, the same local traffic
and the same instants of scrapes, rule evaluations, bridge reads and heartbeats: they
differ only in where they send the Scheduler's requests. So all of it is drawn here,
once, and the simulation (bench/scheduling/sim_engine.py) only replays it.

The 3-pool fleet is the closed loop's (bench/scheduling/fleet.py SIM_POOLS) and its
arrivals are drawn as run_cell draws them, from the same generators in the same order:
a seed offers the simulation the requests it offers the loop.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.scheduling.fleet import LOCAL_POOL, SIM_POOLS, SIM_TOKENS_PER_SECOND, TOKENS
from bench.scheduling.loop import (
    HEARTBEAT_S,
    LOCAL_FLIP_S,
    LOCAL_ON_SHARE,
    LOCAL_PATTERN,
    LONG_SHARE,
    local_on_spans,
)
from deploy.demo.load_arrivals import arrival_times

# A simulated engine decodes at one speed whatever its batch: a request's time in a
# slot is its tokens over that speed, and its queue wait whatever it spent before.
SERVICE_S = (TOKENS["sim"][0] / SIM_TOKENS_PER_SECOND,  # short, long
             TOKENS["sim"][1] / SIM_TOKENS_PER_SECOND)
# A fleet of N pools: capacities drawn from these (unless the scenario names its own),
# local traffic on this share of the pools (at least one), each at its own phase of the
# loop's on/off pattern.
CAPACITY_CHOICES = (2, 4, 8, 16)
LOCAL_POOLS_SHARE = 0.1


@dataclass(frozen=True)
class Scenario:
    pools: int = 3  # 3: the loop's fleet of 8, 4 and 2 slots
    replicas: int = 1
    load: float = 0.7  # share of capacity, the local traffic's mean included
    rate: float | None = None  # the Scheduler's requests/s instead of `load`
    interval_s: float = 5.0  # Prometheus' scrape and rule evaluation interval
    ttl_s: float = 1.0  # how often each replica reads the bridge
    duration_s: float = 30.0
    seed: int = 1
    clock_offset_s: float = 0.0  # every replica's clock less true time
    outage: tuple[float, float] | None = None  # (start, length): the bridge unreachable
    mixed: float = 1.0  # the share of pools whose Proxies send heartbeat reports
    slots: tuple[int, ...] = CAPACITY_CHOICES  # an N-pool fleet's capacities, drawn from
    # A short and a long request's time in a slot: the loop's calibration, to meet the
    # same arrivals as a run of the loop (its rate is set from these).
    service_s: tuple[float, float] = SERVICE_S

    @property
    def mean_service_s(self) -> float:
        return (1 - LONG_SHARE) * self.service_s[0] + LONG_SHARE * self.service_s[1]


@dataclass(frozen=True)
class Workload:
    """Every request of a scenario by arrival, the Scheduler's and the local traffic's,
    and the phases of everything periodic (seconds into [0, period))."""

    names: tuple[str, ...]
    capacities: tuple[int, ...]
    times: list[float]
    service_s: list[float]
    local_pool: list[int]  # the pool a local request goes to; -1: the Scheduler's
    replica: list[int]  # the replica a Scheduler's request reaches; -1: local
    scheduler_rate: float
    local_mean_rate: float  # over the duration, every local pool together
    scrape_phase: list[float]
    heartbeat_phase: list[float]
    eval_phase: float
    read_phase: list[float]
    reporting: frozenset[int]  # the pools whose Proxies send heartbeat reports
    mean_service_s: float

    @property
    def full_rate(self) -> float:
        return sum(self.capacities) / self.mean_service_s

    @property
    def offered_load(self) -> float:
        return (self.scheduler_rate + self.local_mean_rate) / self.full_rate


def _fleet(scenario: Scenario) -> tuple[tuple[str, ...], tuple[int, ...],
                                        dict[int, float]]:
    """Names, capacities, and each local pool's phase."""
    if scenario.pools == 3:
        names = tuple(s.proxy_id for s in SIM_POOLS)
        return names, tuple(s.capacity for s in SIM_POOLS), {names.index(LOCAL_POOL): 0.0}
    rng = random.Random(f"fleet-{scenario.seed}")
    capacities = tuple(rng.choice(scenario.slots) for _ in range(scenario.pools))
    local = rng.sample(range(scenario.pools), max(1, round(LOCAL_POOLS_SHARE * scenario.pools)))
    phases = {p: rng.uniform(0, 2 * LOCAL_FLIP_S) for p in sorted(local)}
    return tuple(f"pool-{i:03d}" for i in range(scenario.pools)), capacities, phases


def _on_s(phase: float, duration: float) -> float:
    """Seconds the local pattern, started `phase` s before the scenario, is on in it."""
    return sum(max(0.0, min(end, phase + duration) - max(begin, phase))
               for begin, end in local_on_spans(phase + duration))


def draw(scenario: Scenario) -> Workload:
    """The scenario's workload: the Scheduler's rate as run_cell sets it (the load less
    the local traffic's mean over the duration) unless a rate is given."""
    names, capacities, local_phases = _fleet(scenario)
    duration = scenario.duration_s
    rng = random.Random(scenario.seed)
    service, mean_service = scenario.service_s, scenario.mean_service_s
    on_rates = {p: LOCAL_ON_SHARE * capacities[p] / mean_service for p in local_phases}
    local_mean = sum(r * _on_s(local_phases[p], duration) / duration
                     for p, r in on_rates.items())
    rate = scenario.rate
    if rate is None:
        rate = scenario.load * sum(capacities) / mean_service - local_mean
        if rate <= 0:
            raise ValueError(f"a load of {scenario.load:g} is below the local traffic alone")
    sched_times = list(arrival_times(rate, rng, None, duration))
    spread = random.Random(scenario.seed + 2)
    # (arrival, service, local pool or -1, replica or -1)
    requests = [(t, service[rng.random() < LONG_SHARE], -1,
                 spread.randrange(scenario.replicas)) for t in sched_times]
    for p, phase in local_phases.items():
        times = [t - phase for t in arrival_times(on_rates[p], rng, LOCAL_PATTERN,
                                                  phase + duration) if t >= phase]
        requests += [(t, service[rng.random() < LONG_SHARE], p, -1) for t in times]
    requests.sort(key=lambda r: r[0])
    phases = random.Random(f"phases-{scenario.seed}")
    n = len(names)
    reporting = frozenset(phases.sample(range(n), round(scenario.mixed * n)))
    return Workload(
        names=names, capacities=capacities,
        times=[r[0] for r in requests], service_s=[r[1] for r in requests],
        local_pool=[r[2] for r in requests], replica=[r[3] for r in requests],
        scheduler_rate=rate, local_mean_rate=local_mean,
        scrape_phase=[phases.uniform(0, scenario.interval_s) for _ in range(n)],
        heartbeat_phase=[phases.uniform(0, HEARTBEAT_S) for _ in range(n)],
        eval_phase=phases.uniform(0, scenario.interval_s),
        read_phase=[phases.uniform(0, scenario.ttl_s) for _ in range(scenario.replicas)],
        reporting=reporting, mean_service_s=mean_service)
