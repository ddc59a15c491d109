"""The Proxy exporter's one collector: the pool's state, read at scrape time.

Nothing is mirrored into client_python Gauges per request; every scrape reads
the registry, the dispatch counters and the queues as they are, so a series
exists exactly while what it describes does — a deregistered Instance leaves
no label set behind, a queue with nobody waiting has no oldest age, and an
Instance never dispatched to has no idle time (unknown, not idle).

Beside the per-Instance series (drill-down, the Proxy bridge's local view) it
publishes the pool's counts (registered, alive, stale, idle, idle unknown), its
inflight and configured capacity as one series each: it knows them at scrape
time, and a pool rule that sums one series per pool costs nothing per Instance
(docs/benchmarks.md). The registry forgets a member silent past its bound, so its
series end at the next scrape; how many it forgot is a counter, a measured 0 from
the start.

QPS is deliberately absent: `poolscope_proxy_requests_total` is a real counter
and Prometheus derives the rate (`rate(...[1m])`) from it.

If reading the state raises, the state families are left out of this scrape,
`poolscope_proxy_collector_success` says 0, and the scrape still succeeds.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from poolscope.contract import catalog as c
from poolscope.contract.thresholds import IDLE_S
from poolscope.exporters.proxy.clock import SYSTEM_CLOCK, Clock
from poolscope.exporters.proxy.dispatch import DispatchTracker
from poolscope.exporters.proxy.queues import REJECTION_REASONS, QueueMetrics
from poolscope.exporters.proxy.registry import Instance, InstanceRegistry
from poolscope.exporters.proxy.report import (
    awake,
    pool_admission_state,
    queue_depth_path,
    shape,
)

log = logging.getLogger(__name__)

COLLECTOR_NAME = "proxy"


def _inflight(instances: Sequence[Instance]) -> float:
    return float(sum(i.dispatch.inflight for i in instances))


def _capacity(instances: Sequence[Instance], serving: Sequence[Instance]) -> float | None:
    """The configured sum of the `serving` Instances (the alive ones; for the load report,
    those of them awake), a measured 0 when none serves (a dead Instance offers nothing).
    None when none is configured, or when a serving one is not: its capacity is unknown
    here, not 0, and the Instance exporters' figures stand in (rules/proxy_pool.yml)."""
    configured = [i.capacity for i in serving]
    if (any(i.capacity is not None for i in instances)
            and all(v is not None for v in configured)):
        return float(sum(v for v in configured if v is not None))
    return None


class ProxyCollector(Collector):
    """Publishes exactly the catalog's PROXY_* families for one Proxy."""

    def __init__(self, proxy_id: str, registry: InstanceRegistry, dispatch: DispatchTracker,
                 queues: Iterable[QueueMetrics] = (), clock: Clock = SYSTEM_CLOCK) -> None:
        self.proxy_id = proxy_id
        self._registry = registry
        self._dispatch = dispatch
        self.queues = list(queues)
        self._clock = clock

    def collect(self) -> Iterator[Metric]:
        started = self._clock.monotonic()
        try:
            families = self._read()
            success = 1.0
        except Exception:
            log.exception("proxy collector %s failed to read its state", self.proxy_id)
            families = []
            success = 0.0
        yield from (family for family in families if family.samples)
        health = (self.proxy_id, c.SOURCE_EXPORTER, COLLECTOR_NAME)
        ok = c.PROXY_COLLECTOR_SUCCESS.new()
        ok.add_metric(health, success)
        yield ok
        took = c.PROXY_COLLECTOR_DURATION.new()
        took.add_metric(health, max(0.0, self._clock.monotonic() - started))
        yield took

    def _read(self) -> list[Metric]:
        """Every state family, built completely before any is published."""
        return [*self._instance_families(), *self._pool_families(), *self._queue_families(),
                self._requests_family(), self._forgotten_family()]

    def _pool_families(self) -> Sequence[Metric]:
        """The pool's counts, inflight and configured capacity, one series each."""
        now = self._clock.monotonic()
        instances, alive = self._members(now)
        dispatched = [i.dispatch.last_dispatch_monotonic for i in instances
                      if i.dispatch.last_dispatch_monotonic is not None]
        counts = {
            c.POOL_INSTANCES_REGISTERED: len(instances),
            c.POOL_INSTANCES_ALIVE: len(alive),
            c.POOL_INSTANCES_STALE: len(instances) - len(alive),
            c.POOL_INSTANCES_IDLE: sum(1 for t in dispatched if now - t > IDLE_S),
            c.POOL_INSTANCES_IDLE_UNKNOWN: len(instances) - len(dispatched),
        }
        idle = {c.POOL_INSTANCES_IDLE, c.POOL_INSTANCES_IDLE_UNKNOWN}
        families = []
        for family, count in counts.items():
            metric = family.new()
            source = c.SOURCE_PROXY_DISPATCH if family in idle else c.SOURCE_PROXY_REGISTRY
            metric.add_metric((self.proxy_id, source), float(count))
            families.append(metric)
        inflight = c.POOL_INFLIGHT.new()
        inflight.add_metric((self.proxy_id, c.SOURCE_PROXY_DISPATCH), _inflight(instances))
        families.append(inflight)
        capacity = c.POOL_CAPACITY.new()
        configured = _capacity(instances, alive)
        if configured is not None:
            capacity.add_metric((self.proxy_id, c.SOURCE_CONFIGURED), configured)
        families.append(capacity)
        return families

    def _members(self, now: float) -> tuple[list[Instance], list[Instance]]:
        """Every registered Instance, and those alive at `now`."""
        instances = self._registry.instances()
        return instances, [i for i in instances if self._registry.is_alive(i, now)]

    def load_report(self) -> dict[str, Any]:
        """The pool's load read now (poolscope.exporters.proxy.report): what this Proxy
        holds in flight and in its lines, the configured capacity of its alive members
        that are not asleep, the best admission state they state, and when it read them
        (`inflight_sampled_at`, its own wall clock, as `generated_at`).

        Its capacity leaves asleep members out as the summary's rules do; the /metrics
        series does not, since the rules subtract them from it. Raises what reading the
        state raises: a heartbeat then carries no load, never a made-up one.
        """
        read_at = self._clock.time()
        instances, alive = self._members(self._clock.monotonic())
        return shape(self.proxy_id, read_at, {
            "load.inflight_total": _inflight(instances),
            "load.capacity": _capacity(instances, awake(alive)),
            **{queue_depth_path(q.name): float(q.depth()) for q in self.queues},
            "load.inflight_sampled_at": read_at,
            "health.pool_admission_state": pool_admission_state(alive),
        })

    def _instance_families(self) -> Sequence[Metric]:
        f = {fam: fam.new() for fam in (
            c.PROXY_INSTANCE_REGISTERED, c.PROXY_INSTANCE_ALIVE,
            c.PROXY_INSTANCE_HEARTBEAT_AGE, c.PROXY_INSTANCE_CAPACITY,
            c.PROXY_INSTANCE_INFLIGHT, c.PROXY_INSTANCE_REQUESTS,
            c.PROXY_INSTANCE_REQUEST_DURATION, c.PROXY_INSTANCE_LAST_DISPATCH,
            c.PROXY_INSTANCE_IDLE)}
        now = self._clock.monotonic()  # one instant for every age in this scrape
        for inst in self._registry.instances():
            registry = (self.proxy_id, inst.instance_id, c.SOURCE_PROXY_REGISTRY)
            dispatch = (self.proxy_id, inst.instance_id, c.SOURCE_PROXY_DISPATCH)
            f[c.PROXY_INSTANCE_REGISTERED].add_metric(registry, 1.0)
            f[c.PROXY_INSTANCE_ALIVE].add_metric(
                registry, 1.0 if self._registry.is_alive(inst, now) else 0.0)
            f[c.PROXY_INSTANCE_HEARTBEAT_AGE].add_metric(
                registry, self._registry.heartbeat_age(inst, now))
            if inst.capacity is not None:
                f[c.PROXY_INSTANCE_CAPACITY].add_metric(
                    (self.proxy_id, inst.instance_id, c.SOURCE_CONFIGURED), float(inst.capacity))
            stats = inst.dispatch
            f[c.PROXY_INSTANCE_INFLIGHT].add_metric(dispatch, float(stats.inflight))
            for outcome in c.OUTCOMES:
                f[c.PROXY_INSTANCE_REQUESTS].add_metric(
                    (*dispatch, outcome), float(stats.outcomes[outcome]))
            stats.duration.add_to(f[c.PROXY_INSTANCE_REQUEST_DURATION], dispatch)
            if stats.last_dispatch_time is not None and stats.last_dispatch_monotonic is not None:
                f[c.PROXY_INSTANCE_LAST_DISPATCH].add_metric(dispatch, stats.last_dispatch_time)
                f[c.PROXY_INSTANCE_IDLE].add_metric(
                    dispatch, max(0.0, now - stats.last_dispatch_monotonic))
        return list(f.values())

    def _queue_families(self) -> Sequence[Metric]:
        f = {fam: fam.new() for fam in (
            c.PROXY_QUEUE_DEPTH, c.PROXY_QUEUE_CAPACITY, c.PROXY_QUEUE_WAIT,
            c.PROXY_QUEUE_OLDEST_AGE, c.PROXY_QUEUE_REJECTIONS)}
        for q in self.queues:
            measured = (self.proxy_id, c.SOURCE_PROXY_QUEUE, q.name)
            f[c.PROXY_QUEUE_DEPTH].add_metric(measured, float(q.depth()))
            if q.capacity is not None:
                f[c.PROXY_QUEUE_CAPACITY].add_metric(
                    (self.proxy_id, c.SOURCE_CONFIGURED, q.name), float(q.capacity))
            q.wait.add_to(f[c.PROXY_QUEUE_WAIT], measured)
            oldest = q.oldest_age()
            if oldest is not None:
                f[c.PROXY_QUEUE_OLDEST_AGE].add_metric(measured, oldest)
            for reason in REJECTION_REASONS:
                f[c.PROXY_QUEUE_REJECTIONS].add_metric(
                    (*measured, reason), float(q.rejections[reason]))
        return list(f.values())

    def _forgotten_family(self) -> Metric:
        family = c.PROXY_INSTANCES_FORGOTTEN.new()
        family.add_metric((self.proxy_id, c.SOURCE_PROXY_REGISTRY),
                          float(self._registry.forgotten))
        return family

    def _requests_family(self) -> Metric:
        family = c.PROXY_REQUESTS.new()
        for outcome in c.OUTCOMES:
            family.add_metric((self.proxy_id, c.SOURCE_PROXY_DISPATCH, outcome),
                              float(self._dispatch.requests[outcome]))
        return family
