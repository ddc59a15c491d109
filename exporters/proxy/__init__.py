"""Proxy exporter: what a Proxy knows about its pool, read at scrape time.

See `exporter.ProxyExporter` for the embedding API.
"""

from poolscope.exporters.proxy.dispatch import Dispatch, DispatchTracker, Request, UnknownInstance
from poolscope.exporters.proxy.exporter import ProxyExporter
from poolscope.exporters.proxy.queues import QueueMetrics, Ticket
from poolscope.exporters.proxy.registry import Instance, InstanceRegistry

__all__ = [
    "Dispatch",
    "DispatchTracker",
    "Instance",
    "InstanceRegistry",
    "ProxyExporter",
    "QueueMetrics",
    "Request",
    "Ticket",
    "UnknownInstance",
]
