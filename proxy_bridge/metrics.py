"""The bridge's own /metrics: the Scheduler bridge's instruments under this bridge's name.

Both bridges time requests, backend queries and snapshot refreshes the same way, so
this one reuses `scheduler_bridge.metrics.BridgeMetrics`, registered in a private
registry and republished with the `poolscope_proxy_bridge_` prefix: a dashboard
that scrapes both can tell them apart without a relabel rule.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client import Counter as PromCounter
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from scheduler_bridge.metrics import BridgeMetrics

SCHEDULER_PREFIX = "poolscope_scheduler_bridge_"
PREFIX = "poolscope_proxy_bridge_"


class _Renamed(Collector):
    def __init__(self, inner: CollectorRegistry) -> None:
        self._inner = inner

    def collect(self) -> Iterator[Metric]:
        for metric in self._inner.collect():
            metric.name = _rename(metric.name)
            metric.samples = [s._replace(name=_rename(s.name)) for s in metric.samples]
            yield metric


def _rename(name: str) -> str:
    return PREFIX + name.removeprefix(SCHEDULER_PREFIX)


class ProxyBridgeMetrics(BridgeMetrics):
    """BridgeMetrics plus what only this bridge does: the Proxy-local view."""

    def __init__(self, registry: CollectorRegistry) -> None:
        inner = CollectorRegistry()
        super().__init__(inner)
        registry.register(_Renamed(inner))
        self.local_views = PromCounter(
            f"{PREFIX}local_views_total",
            "Proxy-local view reads that came with a snapshot refresh, by outcome "
            "(ok | error).", ["outcome"], registry=registry)
