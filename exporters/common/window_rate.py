"""A counter's rate over the exporter's own last RATE_WINDOW_S of samples.

An exporter knows when it sampled each counter value; Prometheus only knows when
it scraped. So the exporter can state a rate that is exact over its own window,
and the pool rules read one gauge per Instance instead of the counter three
times (`rate()` plus the two reads that check its window is covered; the cost is in
docs/benchmarks.md). The rule's semantics move here unchanged: no rate until the
window is covered to within RATE_EDGE_S of its start (after a start or a counter
reset), never one extrapolated from a partial window. Unlike `rate()`, a gap in
Prometheus' scrapes does not bias it: the value is the last minute's as of the
sample, and the sample's own age says how old that is.
"""

from __future__ import annotations

from collections import deque

from poolscope.contract.thresholds import FRESH_S, RATE_EDGE_S, RATE_WINDOW_S


class WindowRate:
    """Per-second increase of one counter over its samples of the last `window_s`."""

    def __init__(self, window_s: float = RATE_WINDOW_S, edge_s: float = RATE_EDGE_S,
                 longest_interval_s: float = FRESH_S) -> None:
        self._window = window_s
        self._covered = window_s - edge_s
        # The window's first point may be one sampling interval before its start, and no
        # sampling interval is longer than FRESH_S (sampling.sample_interval): a longer
        # span is a gap in the samples (failed reads), which the rate must not average over.
        self._longest = window_s + longest_interval_s
        self._points: deque[tuple[float, float]] = deque()

    def observe(self, at: float, value: float | None) -> None:
        """Adds the counter's `value` sampled at monotonic time `at`. A value below the
        last one (a restarted process, a reset NIC) starts the window over; None (the
        read failed or the page lacks it) leaves the window as it is."""
        if value is None:
            return
        points = self._points
        if points and (value < points[-1][1] or at <= points[-1][0]):
            points.clear()
        points.append((at, value))
        # The window starts on the newest point at or before its start, so a sampling
        # interval that does not divide it still spans it whole.
        while len(points) > 1 and points[1][0] <= at - self._window:
            points.popleft()

    def reset(self) -> None:
        """Forgets every point: the counter now counts something else."""
        self._points.clear()

    def rate(self) -> float | None:
        """The increase per second from the window's first point to its newest (a span of
        the window, or up to one sampling interval more), or None until they are at
        least window - edge apart, and after a gap in the samples until a whole window
        follows it."""
        if not self._points:
            return None
        (first_at, first), (newest_at, newest) = self._points[0], self._points[-1]
        span = newest_at - first_at
        return (newest - first) / span if self._covered <= span <= self._longest else None
