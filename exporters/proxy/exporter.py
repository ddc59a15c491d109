"""The Proxy exporter as one object a Python (asyncio) proxy embeds.

    exporter = ProxyExporter("proxy-a", heartbeat_timeout=10.0, forget_after=600.0)
    exporter.add_queue("prepare", depth=lambda: len(prepare_queue), capacity=64)
    exporter.register_into(registry)           # a prometheus_client CollectorRegistry
    exporter.instances.register("i-1", "http://10.0.0.5:8000", capacity=8)
    exporter.instances.set_admission_state("i-1", "asleep")  # as the Instance says
    async with exporter.dispatch.request() as req:       # every accepted request
        async with exporter.dispatch.track("i-1") as d:  # its time at the Instance
            ...

No threads: every method is a plain, non-blocking call on the event loop, and
the collector reads the same objects at scrape time. Serve /metrics from the
loop too (deploy/demo/embedded_proxy.py does) so a scrape never reads a
half-updated record. An aiohttp Proxy can serve it as Poolscope's own services do,
in the format the scraper negotiates (OpenMetrics for Prometheus):

    app.router.add_get("/metrics", metrics_handler(ScrapePage(registry).page))

(both from `poolscope.exporters.common.exposition`). The exporter adds no process
or build series of its own: those belong to the Proxy, whose registry may already
hold them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry

from poolscope.contract.thresholds import FORGET_AFTER_S
from poolscope.exporters.proxy.clock import SYSTEM_CLOCK, Clock
from poolscope.exporters.proxy.collector import ProxyCollector
from poolscope.exporters.proxy.dispatch import DispatchTracker
from poolscope.exporters.proxy.queues import QueueMetrics
from poolscope.exporters.proxy.registry import DEFAULT_HEARTBEAT_TIMEOUT, InstanceRegistry


class ProxyExporter:
    """One Proxy's registry, dispatch tracker, queues and their collector."""

    def __init__(self, proxy_id: str, heartbeat_timeout: float = DEFAULT_HEARTBEAT_TIMEOUT,
                 clock: Clock = SYSTEM_CLOCK, forget_after: float = FORGET_AFTER_S) -> None:
        """An Instance silent for `heartbeat_timeout` seconds is stale, for `forget_after`
        forgotten (poolscope.exporters.proxy.registry)."""
        if not proxy_id:
            raise ValueError("proxy_id must be a non-empty string")
        self.proxy_id = proxy_id
        self.clock = clock
        self.instances = InstanceRegistry(heartbeat_timeout, clock, forget_after,
                                          proxy_id=proxy_id)
        self.dispatch = DispatchTracker(self.instances.dispatch_stats, clock)
        self.collector = ProxyCollector(proxy_id, self.instances, self.dispatch, (), clock)

    def add_queue(self, name: str, depth: Callable[[], int],
                  capacity: int | None = None) -> QueueMetrics:
        """Watch one of the Proxy's queues ("prepare" or "ready"); depth is read per scrape."""
        if any(q.name == name for q in self.collector.queues):
            raise ValueError(f"queue {name!r} is already watched")
        queue = QueueMetrics(name, depth, capacity, self.clock)
        self.collector.queues.append(queue)
        return queue

    def load_report(self) -> dict[str, Any]:
        """The pool's load read now, for the Proxy's heartbeats (ProxyCollector.load_report;
        its shape is bridge/schema/load_report.schema.json)."""
        return self.collector.load_report()

    def register_into(self, registry: CollectorRegistry) -> None:
        registry.register(self.collector)
