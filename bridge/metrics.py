"""The bridge's own health on /metrics: how fast it answers, and how its backends fare.

These are about the bridge process, not about pools, so they are not in the exporter
catalog. Label values come from bounded sets (route templates, configured backends,
ErrorKind, rejection reasons): nothing a client sends can create a series.
"""

from __future__ import annotations

from collections import Counter

from prometheus_client import CollectorRegistry, Gauge, Histogram
from prometheus_client import Counter as PromCounter

from poolscope.bridge.promapi import BackendError

_FAST = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class BridgeMetrics:
    """`namespace` names the bridge (poolscope_scheduler_bridge, poolscope_proxy_bridge),
    so a dashboard that scrapes both tells them apart without a relabel rule."""

    def __init__(self, registry: CollectorRegistry, *, namespace: str) -> None:
        self.request_seconds = Histogram(
            "request_duration_seconds", "Time to answer an HTTP request, by route.",
            ["route", "status"], buckets=_FAST, namespace=namespace, registry=registry)
        self.query_seconds = Histogram(
            "backend_query_duration_seconds",
            "Time one backend took to answer (or fail) one instant query.",
            ["backend"], buckets=_FAST, namespace=namespace, registry=registry)
        self.query_errors = PromCounter(
            "backend_query_errors_total", "Failed instant queries, by backend and cause.",
            ["backend", "cause"], namespace=namespace, registry=registry)
        self.cache = PromCounter(
            "cache_requests_total",
            "Snapshot lookups: hit (served from memory: the rules are not due to write "
            "again, or a backend was asked less than --cache-ttl ago), shared (joined a "
            "probe or read in flight), miss (started one); late counts those of them served "
            "the last snapshot, stale, while it ran past --answer-within.", ["result"],
            namespace=namespace, registry=registry)
        self.probes = PromCounter(
            "probes_total",
            "Asked only when the rules last wrote the rollups, by outcome: unchanged (no "
            "full read needed), moved (a full read followed), error.", ["outcome"],
            namespace=namespace, registry=registry)
        self.refreshes = PromCounter(
            "refreshes_total", "Full reads of every pool's rollups, by outcome.", ["outcome"],
            namespace=namespace, registry=registry)
        self.rejected_series = PromCounter(
            "rejected_series_total",
            "proxy_pool: series that could not become a value; their field is null.",
            ["reason"], namespace=namespace, registry=registry)
        self.snapshot_pools = Gauge(
            "snapshot_pools", "Pools in the last good snapshot.", namespace=namespace,
            registry=registry)
        self.snapshot_series = Gauge(
            "snapshot_series", "proxy_pool: series in the last good snapshot.",
            namespace=namespace, registry=registry)

    def observe_query(self, backend: str, seconds: float, error: BackendError | None) -> None:
        self.query_seconds.labels(backend).observe(seconds)
        if error is not None:
            self.query_errors.labels(backend, error.kind).inc()

    def observe_snapshot(self, pools: int, series: int, rejected: Counter[str]) -> None:
        self.snapshot_pools.set(pools)
        self.snapshot_series.set(series)
        for reason, n in rejected.items():
            self.rejected_series.labels(reason).inc(n)
