"""The dispatch path: what the Proxy sent where, and how each request ended.

Inflight is maintained by request execution itself: `track(instance_id)` is an
async context manager entered when a request is dispatched to an Instance and
left however it ends — completion, error, timeout or cancellation — so the
count cannot leak and is never a heartbeat-reported guess (inflight comes from
the Proxy's own dispatches). `request()` counts every request the
Proxy accepted by its final outcome, including those that never reached an
Instance (rejected by a full queue, timed out in a queue).

QPS is not computed here: the counters only ever rise, and Prometheus derives
a rate with `rate(poolscope_proxy_requests_total[1m])`, so no rolling window in
the Proxy can drift from the requests it actually served.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Literal

from poolscope.contract.catalog import OUTCOMES
from poolscope.exporters.proxy.clock import SYSTEM_CLOCK, Clock
from poolscope.exporters.proxy.histogram import REQUEST_DURATION_BUCKETS, Histogram

Outcome = Literal["ok", "error", "timeout", "rejected", "cancelled"]


@dataclass
class DispatchStats:
    """One Instance's dispatch history, kept as long as the Instance is registered."""

    inflight: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    duration: Histogram = field(default_factory=lambda: Histogram(REQUEST_DURATION_BUCKETS))
    last_dispatch_time: float | None = None  # wall clock, for people
    last_dispatch_monotonic: float | None = None  # for the idle age


class _Tracked:
    """Shared outcome rule of a request and of a dispatch.

    Cancellation always wins: a cancelled task did not finish, whatever was
    decided before. Otherwise an outcome set by the embedding proxy wins (an
    engine's HTTP 500 is an error without any exception; a failed write to a
    client that left is a cancellation). Otherwise the exception decides:
    TimeoutError is a timeout, anything else an error. A deadline must
    therefore sit inside the context (`async with track(id), asyncio.timeout(t)`):
    one outside it reaches the context as a cancellation.
    """

    def __init__(self) -> None:
        self._outcome: Outcome | None = None

    @property
    def outcome(self) -> Outcome | None:
        return self._outcome

    @outcome.setter
    def outcome(self, value: Outcome) -> None:
        if value not in OUTCOMES:
            raise ValueError(f"unknown outcome {value!r}; one of {OUTCOMES}")
        self._outcome = value

    def _settle(self, exc: BaseException | None) -> Outcome:
        if isinstance(exc, asyncio.CancelledError):
            self._outcome = "cancelled"
        elif self._outcome is None:
            if exc is None:
                self._outcome = "ok"
            elif isinstance(exc, TimeoutError):
                self._outcome = "timeout"
            else:
                self._outcome = "error"
        return self._outcome


class Dispatch(_Tracked):
    """One request's stay at one Instance; see `DispatchTracker.track`."""

    def __init__(self, stats: DispatchStats, clock: Clock) -> None:
        super().__init__()
        self._stats = stats
        self._clock = clock
        self._started: float | None = None

    async def __aenter__(self) -> Dispatch:
        if self._started is not None:
            raise RuntimeError("a Dispatch is entered once")
        self._started = self._clock.monotonic()
        self._stats.inflight += 1
        self._stats.last_dispatch_monotonic = self._started
        self._stats.last_dispatch_time = self._clock.time()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        assert self._started is not None
        self._stats.inflight -= 1
        self._stats.outcomes[self._settle(exc)] += 1
        self._stats.duration.observe(max(0.0, self._clock.monotonic() - self._started))


class Request(_Tracked):
    """One request the Proxy accepted; see `DispatchTracker.request`."""

    def __init__(self, outcomes: Counter[str]) -> None:
        super().__init__()
        self._outcomes = outcomes

    async def __aenter__(self) -> Request:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        self._outcomes[self._settle(exc)] += 1


class UnknownInstance(KeyError):
    """Dispatch to an Instance the registry does not hold."""


class DispatchTracker:
    """Counts requests and dispatches; per-Instance state lives in the registry.

    Keeping dispatch stats on the registry's Instance record means that
    deregistering or forgetting an Instance drops its series in one step; a dispatch
    still in flight at that moment finishes on the orphaned record and resurrects
    nothing.
    The registry is reached through `stats_of` (an id's stats, or None when it is
    not registered), so this module needs nothing from the registry's.
    """

    def __init__(self, stats_of: Callable[[str], DispatchStats | None],
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self._stats_of = stats_of
        self._clock = clock
        self.requests: Counter[str] = Counter()

    def track(self, instance_id: str) -> Dispatch:
        """`async with tracker.track(id) as d:` around the request's time at the Instance."""
        stats = self._stats_of(instance_id)
        if stats is None:
            raise UnknownInstance(instance_id)
        return Dispatch(stats, self._clock)

    def request(self) -> Request:
        """`async with tracker.request() as r:` around the whole accepted request."""
        return Request(self.requests)
