"""The closed loop as a discrete-event model, driving the loop's own policy objects.

Why a model beside the loop: the loop runs three pools in real time on this machine;
how the picker behaves with a hundred pools, ten Scheduler replicas, a skewed clock or
a bridge outage needs minutes of simulated traffic per cell, not a fleet. What it keeps
of the real stack is what a policy can see and when:

- a pool is its slots and its Proxy's FIFO ready line (the Proxy hands its Instances
  no more than their slots); a request holds a slot for its decode time, no batch
  slowdown (the simulated engine's behaviour);
- Prometheus scrapes each pool's Proxy every `interval` at the pool's own phase (its
  in flight and ready line, at that instant) and evaluates the rules every `interval`
  at their own phase: a snapshot holds each pool's last scraped values, measured at
  that scrape, evaluated (rollups_at, generated_at) then;
- each replica reads the bridge every `ttl` at its own phase and gets the newest
  evaluation, aged by true time (the bridge's and Prometheus' clocks agree); during
  an outage it gets an error instead;
- each reporting Proxy sends its held count and capacity every heartbeat, at its own
  phase, to every replica, received (and measured) at once;
- every replica's clock is true time plus the scenario's offset.

The policies are bench/scheduling/policies.py's, one object per replica, as run_cell
builds them: the picker measured here is the product's PoolPicker, not a model of it.
Their coroutines never wait on anything here, so each is run to its end in place.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from bench.scheduling.loop import HEARTBEAT_S
from bench.scheduling.policies import POLICIES, Done, Policy, View
from bench.scheduling.sim_workload import Scenario, Workload
from poolscope.scheduler_bridge.client import BridgeError, BridgeSnapshot, parse_pool
from poolscope.scheduler_bridge.load_report import receive_report

# Event kinds; at one instant, the earlier-scheduled event first.
_FINISH, _SCRAPE, _EVALUATE, _READ, _HEARTBEAT = range(5)
# Monitoring starts this long before the first request, so that the first decision is
# made on what a running Scheduler holds (run_cell waits for its feeds the same way).
_WARMUP_INTERVALS = 2
# The model's time 0 on the wall clock every host writes its instants in (a report's
# may not be negative; the warmup starts before 0).
_EPOCH = 1.8e9

_T = TypeVar("_T")


def _run(coroutine: Coroutine[Any, Any, _T]) -> _T:
    """A policy's coroutine that awaits nothing pending, to its result."""
    try:
        coroutine.send(None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    coroutine.close()
    raise RuntimeError("a policy waited on something the simulation does not provide")


def _pool_doc(proxy_id: str, capacity: int, running: int, queued: int, sampled_at: float,
              generated_at: float) -> dict[str, Any]:
    """A pool's load as a summary or a load report carries it."""
    return {"schema_version": 1, "proxy_id": proxy_id, "generated_at": generated_at,
            "load": {"inflight_total": float(running), "ready_queue_depth": float(queued),
                     "prepare_queue_depth": 0.0, "capacity": float(capacity),
                     "load_ratio": running / capacity, "inflight_sampled_at": sampled_at}}


@dataclass(frozen=True)
class Result:
    """The Scheduler's requests, by arrival: latency and queue wait (until a slot took it:
    its latency less its own decode time); and the replicas' policy objects, to read
    their pickers."""

    latency: list[float]
    queue_wait: list[float]
    replicas: list[Policy]


def simulate(scenario: Scenario, workload: Workload, policy: str, *,
             unaware: bool = False) -> Result:
    """One policy through the scenario; `unaware`: each replica's policy is built as if
    it were the only one (the picker's replicas=1)."""
    return _Simulation(scenario, workload, policy, unaware).run()


class _Simulation:
    def __init__(self, scenario: Scenario, workload: Workload, policy: str,
                 unaware: bool) -> None:
        self.s = scenario
        self.w = workload
        self.now = -_WARMUP_INTERVALS * scenario.interval_s - scenario.ttl_s - HEARTBEAT_S
        n = len(workload.names)
        self.running = [0] * n
        self.lines: list[deque[int]] = [deque() for _ in range(n)]
        self.scraped: list[tuple[int, int, float] | None] = [None] * n
        self.evaluated: BridgeSnapshot | None = None
        self.heap: list[tuple[float, int, int, int]] = []
        self.seq = 0
        cls = POLICIES[policy]
        self.cls = cls
        capacities = dict(zip(workload.names, workload.capacities, strict=True))
        told = 1 if unaware else scenario.replicas
        offset = scenario.clock_offset_s
        self.replicas = [cls(capacities, told, random.Random(scenario.seed + 1 + 1000 * r),
                             lambda: self.now + _EPOCH + offset) for r in range(scenario.replicas)]
        self.view = View(capacities, random.Random(scenario.seed + 1), self._live)

    async def _live(self) -> Mapping[str, float | None]:
        """The oracle's read: what each pool holds now, in flight and in its line."""
        return {name: self.running[p] + len(self.lines[p])
                for p, name in enumerate(self.w.names)}

    def _at(self, t: float, kind: int, arg: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, arg))

    def _first(self, phase: float, period: float) -> float:
        """The first instant at that phase from the start of the warmup."""
        return phase + period * math.ceil((self.now - phase) / period)

    def run(self) -> Result:
        s, w = self.s, self.w
        for p in range(len(w.names)):
            self._at(self._first(w.scrape_phase[p], s.interval_s), _SCRAPE, p)
            if self.cls.reads_reports and p in w.reporting:
                self._at(self._first(w.heartbeat_phase[p], HEARTBEAT_S), _HEARTBEAT, p)
        self._at(self._first(w.eval_phase, s.interval_s), _EVALUATE, 0)
        if self.cls.reads_summary:
            for r in range(s.replicas):
                self._at(self._first(w.read_phase[r], s.ttl_s), _READ, r)
        total = len(w.times)
        pool_of = [-1] * total
        done: list[Done | None] = [None] * total
        starts = [math.nan] * total
        ends = [math.nan] * total
        index = {name: p for p, name in enumerate(w.names)}
        heap, times, capacities = self.heap, w.times, w.capacities
        running, lines, service = self.running, self.lines, w.service_s
        pop, push = heapq.heappop, heapq.heappush
        arrived = finished = 0
        while finished < total:
            next_arrival = times[arrived] if arrived < total else math.inf
            if heap[0][0] <= next_arrival:
                self.now, _, kind, arg = pop(heap)
                if kind != _FINISH:
                    self._periodic(kind, arg)
                    continue
                ends[arg] = self.now
                finished += 1
                p = pool_of[arg]
                if lines[p]:
                    head = lines[p].popleft()
                    starts[head] = self.now
                    self.seq += 1
                    push(heap, (self.now + service[head], self.seq, _FINISH, head))
                else:
                    running[p] -= 1
                callback = done[arg]
                if callback is not None:
                    callback(False)
                continue
            self.now = next_arrival
            j = arrived
            arrived += 1
            p = w.local_pool[j]
            if p < 0:
                name, done[j] = _run(self.replicas[w.replica[j]].place(self.view))
                p = index[name]
            pool_of[j] = p
            if running[p] < capacities[p]:
                running[p] += 1
                starts[j] = self.now
                self.seq += 1
                push(heap, (self.now + service[j], self.seq, _FINISH, j))
            else:
                lines[p].append(j)
        mine = [j for j in range(total) if w.local_pool[j] < 0]
        return Result([ends[j] - times[j] for j in mine], [starts[j] - times[j] for j in mine],
                      self.replicas)

    def _periodic(self, kind: int, arg: int) -> None:
        s, w, now = self.s, self.w, self.now
        if kind == _SCRAPE:
            self.scraped[arg] = (self.running[arg], len(self.lines[arg]), now + _EPOCH)
            self._at(now + s.interval_s, kind, arg)
        elif kind == _EVALUATE:
            at = now + _EPOCH
            self.evaluated = BridgeSnapshot(
                generated_at=at, stale=False, age_s=None, rollups_at=at, pools={
                    name: parse_pool(_pool_doc(name, w.capacities[p], *scrape, at))
                    for p, (name, scrape) in enumerate(zip(w.names, self.scraped, strict=True))
                    if scrape is not None})
            self._at(now + s.interval_s, kind, arg)
        elif kind == _READ:
            if s.outage is not None and s.outage[0] <= now < s.outage[0] + s.outage[1]:
                self.replicas[arg].summary_failed(BridgeError(None, "bridge unreachable"))
            elif self.evaluated is not None:
                self.replicas[arg].summary_received(
                    replace(self.evaluated, age_s=now + _EPOCH - self.evaluated.generated_at))
            self._at(now + s.ttl_s, kind, arg)
        else:
            report = receive_report(_pool_doc(
                w.names[arg], w.capacities[arg], self.running[arg], len(self.lines[arg]),
                now + _EPOCH, now + _EPOCH), now + _EPOCH + s.clock_offset_s)
            for replica in self.replicas:
                replica.report_received(report)
            self._at(now + HEARTBEAT_S, kind, arg)
