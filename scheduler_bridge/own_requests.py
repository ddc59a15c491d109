"""A Scheduler's own requests per pool, now and over the last minutes.

The summary a Scheduler reads was measured one scrape, one rule evaluation and one
cache hop ago (5-15 s at the default interval). Ranking pools by it as it stands
herds: every request of a refresh window goes to the pool that looked emptiest when
it was written, and none of them is in the summary yet. The part of a pool's load a
Scheduler sent itself needs no metric: it knows it exactly and at once. So it keeps
that count, and reads the summary only for the rest:

    load now  =  summary's requests at T  -  mine in flight at T  +  mine in flight now

which is what an engine router does one level down with the requests it sent since
the last scrape. docs/scheduling.md has the closed-loop measurements behind it.
This module only counts; it makes no decision and calls nothing. Its times and the
summary's are wall-clock seconds of different hosts (the Scheduler's, Prometheus' or
the Proxy's): their clocks must agree well within a request's duration (NTP does).
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from poolscope.scheduler_bridge.client import BridgeSnapshot, PoolSummary


@dataclass
class _History:
    """One pool's count and when it changed (times increasing)."""

    count: int = 0
    times: list[float] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    forgotten_before: float = -math.inf  # changes before this time were dropped

    def change(self, at: float, delta: int, horizon: float) -> None:
        self.count += delta
        self.times.append(at)
        self.counts.append(self.count)
        # Cut when the oldest change is two horizons old, back to the last change at or
        # before one horizon ago (it still holds the count from then on): each change is
        # O(1) amortised however long the Scheduler runs, and a horizon is always known.
        if self.times[0] < at - 2 * horizon:
            keep = bisect.bisect_right(self.times, at - horizon) - 1
            if keep > 0:
                self.forgotten_before = self.times[keep]
                del self.times[:keep], self.counts[:keep]

    def at(self, t: float) -> int | None:
        """The count at `t`, None when `t` is before what is remembered."""
        if t < self.forgotten_before:
            return None
        i = bisect.bisect_right(self.times, t)
        return self.counts[i - 1] if i else 0


class OwnRequests:
    """Counts the requests this Scheduler sent to each pool and has not seen finish.

    Call `sent` when a request is handed to a pool and `finished` exactly once when its
    answer has ended (or failed). Times are wall-clock seconds, as the summary's are.
    """

    def __init__(self, horizon_s: float = 300.0,
                 clock: Callable[[], float] = time.time) -> None:
        if not horizon_s > 0:
            raise ValueError("horizon_s must be > 0")
        self._horizon = horizon_s
        self._clock = clock
        self._pools: dict[str, _History] = {}

    def sent(self, proxy_id: str) -> None:
        self._change(proxy_id, +1)

    def finished(self, proxy_id: str) -> None:
        history = self._pools.get(proxy_id)
        if history is None or history.count == 0:
            raise ValueError(f"finished() without sent() for {proxy_id!r}")
        self._change(proxy_id, -1)

    def _change(self, proxy_id: str, delta: int) -> None:
        self._pools.setdefault(proxy_id, _History()).change(self._clock(), delta,
                                                            self._horizon)

    def in_flight(self, proxy_id: str, at: float) -> int | None:
        """Mine in flight at `at`; None when `at` is before what is remembered (at least
        the last `horizon_s`)."""
        history = self._pools.get(proxy_id)
        return 0 if history is None else history.at(at)

    def requests_now(self, pool: PoolSummary, measured_at: float | None) -> float | None:
        """The pool's requests now: those it held at `measured_at` (in flight, and in the
        Proxy's prepare and ready queues where it has them), less mine in flight then
        (the rest is others' load, never below 0), plus mine now.

        None when the summary's inflight is unknown, or when it was measured is (None) or
        is past the horizon: a Scheduler then ranks the pool by something else, never as
        empty.
        """
        held = self.held(pool)
        if measured_at is None:
            return None
        mine_then = self.in_flight(pool.proxy_id, measured_at)
        if held is None or mine_then is None:
            return None
        return max(0.0, held - mine_then) + self.mine_now(pool.proxy_id)

    def mine_now(self, proxy_id: str) -> int:
        history = self._pools.get(proxy_id)
        return 0 if history is None else history.count

    @staticmethod
    def held(pool: PoolSummary) -> float | None:
        """The requests the summary counts in the pool: in flight, and in its Proxy's
        prepare and ready queues where it has them; None when inflight is unknown.

        A null queue depth is counted as no queue: the Proxy has none, or (a gateway's
        queue shared by several pools) it cannot be split by pool, and then the others'
        part is undercounted by what waits there (never below 0)."""
        load = pool.load
        if load.inflight_total is None:
            return None
        # A queue with no depth is one the pool's Proxy does not have (fields.py, _NO_QUEUE):
        # mine wait in it only where it exists, and then it is measured with the inflight.
        return load.inflight_total + sum(
            d for d in (load.prepare_queue_depth, load.ready_queue_depth) if d is not None)

    def load_now(self, pool: PoolSummary, measured_at: float | None) -> float | None:
        """`requests_now` over the pool's capacity, counting the request about to be
        placed (so a large pool and a small one with the same ratio are told apart:
        the next request adds less to the large one); None when either is unknown, or
        the capacity is a measured 0 (no alive member offers any: nowhere to place it)."""
        requests = self.requests_now(pool, measured_at)
        capacity = pool.load.capacity
        if requests is None or not capacity:
            return None
        return (requests + 1) / capacity


def measured_at(pool: PoolSummary, snapshot: BridgeSnapshot, received_at: float) -> float | None:
    """When the pool's inflight was measured: the scrape the summary names
    (`load.inflight_sampled_at`), else when the rules wrote the snapshot, counted back
    from when it was received by its age (up to one scrape interval late: see
    docs/scheduling.md for what that costs); None when neither is known."""
    if pool.load.inflight_sampled_at is not None:
        return pool.load.inflight_sampled_at
    return None if snapshot.age_s is None else received_at - snapshot.age_s
