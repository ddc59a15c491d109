"""What the simulated engine remembers about finished work, in vLLM's terms.

The simulator keeps plain numbers and renders them at scrape time (see
`sim_metrics`), instead of mirroring every event into prometheus_client metric
objects: a scrape then reads one consistent state, and an engine instance owns
its numbers outright (tests build many engines in one process).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from prometheus_client.utils import floatToGoString

# vLLM's finish reasons as its `request_success_total` labels them. vLLM creates
# every label value at start-up, so a reason that never happened reads a measured 0.
FINISH_REASONS: tuple[str, ...] = ("stop", "length", "abort")

# Bucket bounds copied from vLLM v1 (vllm/v1/metrics/loggers.py), so that
# dashboards and quantile queries written against vLLM work unchanged.
TTFT_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
    7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)
REQUEST_LATENCY_BUCKETS: tuple[float, ...] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
    120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)


@dataclass
class Histogram:
    """A cumulative-bucket histogram: the minimum needed to emit Prometheus' format."""

    bounds: tuple[float, ...]
    counts: list[int] = field(init=False)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        # One slot per finite bound plus the +Inf overflow.
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        # `le` buckets are inclusive, hence bisect_left.
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, cumulative count) pairs ending with +Inf, as Prometheus expects."""
        out: list[tuple[str, int]] = []
        running = 0
        for bound, n in zip((*map(floatToGoString, self.bounds), "+Inf"), self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out


@dataclass
class EngineStats:
    """Counters and histograms over requests that have left the engine."""

    finished: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FINISH_REASONS, 0))
    prompt_tokens: int = 0
    # Tokens of requests that have left; tokens of running requests are added
    # live at scrape time, so the counter rises while a request decodes.
    generation_tokens_finished: int = 0
    e2e_latency: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS))
    queue_time: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS))
    time_to_first_token: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
