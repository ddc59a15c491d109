"""The bridge's own /metrics: the shared bridge instruments under this bridge's name.

Both bridges time requests, backend queries and snapshot refreshes the same way, so
this one reuses `poolscope.bridge.metrics.BridgeMetrics` in its own namespace.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client import Counter as PromCounter

from poolscope.bridge.metrics import BridgeMetrics

NAMESPACE = "poolscope_proxy_bridge"


class ProxyBridgeMetrics(BridgeMetrics):
    """BridgeMetrics plus what only this bridge does: the Proxy-local view."""

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__(registry, namespace=NAMESPACE)
        self.local_views = PromCounter(
            "local_views_total",
            "Proxy-local view reads that came with a snapshot refresh, by outcome "
            "(ok | error).", ["outcome"], namespace=NAMESPACE, registry=registry)
