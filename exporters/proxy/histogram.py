"""A histogram held in the exporter's own state and published at scrape time.

client_python's Histogram would tie a label set to a process-global metric that
outlives the Instance it describes; keeping the buckets here lets the collector
publish a histogram only while its Instance is registered, and drop it with it.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

from prometheus_client.core import HistogramMetricFamily
from prometheus_client.utils import floatToGoString

# Dispatch to an LLM engine: from a short cached answer to a long streamed one. Kept per
# member, so every bound is a series per member: no two neighbours more than 3x apart,
# which is what the dashboards' per-Instance p50/p95/p99 need (docs/scaling.md); a
# dispatch under 0.25 s is a cache hit or an error.
REQUEST_DURATION_BUCKETS: tuple[float, ...] = (
    0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
# Waiting in a Proxy queue: healthy waits are milliseconds, overload is seconds.
QUEUE_WAIT_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Histogram:
    """Cumulative-on-read bucket counts, a sum and a count."""

    def __init__(self, bounds: Sequence[float]) -> None:
        if list(bounds) != sorted(set(bounds)) or not bounds:
            raise ValueError(f"bucket bounds must be distinct and ascending: {bounds!r}")
        if math.isinf(bounds[-1]):
            raise ValueError("+Inf is implicit; leave it out of the bounds")
        self._bounds = tuple(bounds)
        self._counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        if value < 0 or math.isnan(value):
            raise ValueError(f"a duration cannot be {value!r}")
        self._counts[bisect.bisect_left(self._bounds, value)] += 1
        self.sum += value
        self.count += 1

    def add_to(self, family: HistogramMetricFamily, labels: Sequence[str]) -> None:
        """Append this histogram as one labelled series of `family`."""
        buckets: list[tuple[str, float]] = []
        cumulative = 0
        for bound, n in zip((*self._bounds, math.inf), self._counts, strict=True):
            cumulative += n
            buckets.append((floatToGoString(bound), cumulative))
        family.add_metric(list(labels), buckets, self.sum)
