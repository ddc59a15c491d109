"""What a cell's records say: latency, first token, queue wait, refusals, herding."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bench.scheduling.loop import Cell, Lengths, Record

# A request "queued" when its first token came this much later than it does alone: more
# than the Proxy's preparation jitter, less than any slot's wait.
QUEUED_MARGIN_S = 0.25
HERD_WINDOW_S = 5.0
HERD_MIN_DECISIONS = 5


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[rank]


@dataclass(frozen=True)
class Outcome:
    requests: int
    refused: int
    latency: tuple[float, float, float, float]  # mean, p50, p95, p99
    ttft: tuple[float, float]  # p50, p99
    queue_wait: tuple[float, float, float]  # mean, p50, p99
    queued_share: float
    herd: float  # mean over 5 s windows of the largest (share of decisions / share of capacity)
    # Mean latency of the requests that arrived within a window (a bridge outage); nan
    # without one.
    window_mean: float = float("nan")

    @property
    def mean_latency(self) -> float:
        return self.latency[0]

    @property
    def p99_queue_wait(self) -> float:
        return self.queue_wait[2]


def herding(records: Sequence[Record], capacities: Mapping[str, int]) -> float:
    total = sum(capacities.values())
    windows: dict[int, Counter[str]] = {}
    for r in records:
        windows.setdefault(int(r.arrival // HERD_WINDOW_S), Counter())[r.pool] += 1
    ratios = []
    for counts in windows.values():
        n = sum(counts.values())
        if n >= HERD_MIN_DECISIONS:
            ratios.append(max(c / n / (capacities[p] / total) for p, c in counts.items()))
    return statistics.fmean(ratios) if ratios else float("nan")


def outcome(records: Sequence[Record], lengths: Lengths, capacities: Mapping[str, int],
            window: tuple[float, float] | None = None) -> Outcome:
    """`window`: (start, length) of the arrivals whose mean latency is also wanted."""
    done = [r for r in records if r.ok and r.first_token is not None]
    if not done:
        raise RuntimeError(f"no request of {len(records)} was answered")
    latency = [r.end - r.arrival for r in done if r.end is not None]
    ttft = [r.first_token - r.arrival for r in done if r.first_token is not None]
    wait = [lat - lengths.decode_s[r.long] for r, lat in zip(done, latency, strict=True)]
    alone_first = [s - d for s, d in zip(lengths.service_s, lengths.decode_s, strict=True)]
    queued = sum(1 for r, t in zip(done, ttft, strict=True)
                 if t > alone_first[r.long] + QUEUED_MARGIN_S)
    return Outcome(
        requests=len(records), refused=len(records) - len(done),
        latency=(statistics.fmean(latency), percentile(latency, 50), percentile(latency, 95),
                 percentile(latency, 99)),
        ttft=(percentile(ttft, 50), percentile(ttft, 99)),
        queue_wait=(statistics.fmean(wait), percentile(wait, 50), percentile(wait, 99)),
        queued_share=queued / len(done),
        herd=herding(records, capacities),
        window_mean=_window_mean(done, window))


def _window_mean(done: Sequence[Record], window: tuple[float, float] | None) -> float:
    if window is None:
        return float("nan")
    begin, length = window
    inside = [r.end - r.arrival for r in done
              if r.end is not None and begin <= r.arrival < begin + length]
    return statistics.fmean(inside) if inside else float("nan")


@dataclass(frozen=True)
class Row:
    backend: str
    cell: Cell
    outcome: Outcome

    def line(self) -> str:
        c, o = self.cell, self.outcome
        interval = "-" if c.interval_s is None else f"{c.interval_s:g}"
        ttl = "-" if c.ttl_s is None else f"{c.ttl_s:g}"
        return (f"{self.backend:<5} {c.arrivals:<7} {c.load:>4.0%} {interval:>3} {ttl:>3} "
                f"{c.replicas:>3} {c.offset_s:>+5.1f} {c.policy:<16} {c.seed:>4} {o.requests:>5} "
                f"{o.refused:>4} {o.latency[0]:>6.2f} {o.latency[1]:>6.2f} "
                f"{o.latency[2]:>6.2f} {o.latency[3]:>6.2f} {o.ttft[0]:>6.2f} "
                f"{o.ttft[1]:>6.2f} {o.queue_wait[0]:>6.2f} {o.queue_wait[2]:>6.2f} "
                f"{o.queued_share:>6.1%} {o.herd:>5.2f} {o.window_mean:>6.2f}")


HEADER = ("back  arrival load int ttl rep  offs policy           seed  reqs refd   mean    p50"
          "    p95    p99 ttft50 ttft99 qwmean  qw99 queued  herd window")
