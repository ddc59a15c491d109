"""A Scheduler's own requests per pool, now and over the last minutes.

The summary a Scheduler reads was measured one scrape, one rule evaluation and one
cache hop ago (5-15 s at the default interval). Ranking pools by it as it stands
herds: every request of a refresh window goes to the pool that looked emptiest when
it was written, and none of them is in the summary yet. The part of a pool's load a
Scheduler sent itself needs no metric: it knows it exactly and at once. So it keeps
that count, and reads the summary only for the rest:

    load now  =  summary's requests at T  -  mine in flight at T  +  mine in flight now

which is what an engine router does one level down with the requests it sent since
the last scrape. docs/scheduling.md has the closed-loop measurements behind it, and
poolscope.scheduler_bridge.picker makes the decision with it.

Every time here is the Scheduler's own wall clock: `measured_at` turns the summary's
instants into ages it anchors on when the summary arrived, so no other host's clock
is read against this one (docs/scheduling.md, "Clocks").

A request whose end is never reported would make its pool look busier for ever: each
is forgotten `request_timeout_s` after it was sent, and counted in `expired`.
"""

from __future__ import annotations

import bisect
import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from poolscope.scheduler_bridge.client import BridgeSnapshot, PoolSummary

# Longer than any answer a Scheduler waits for (a long generation lasts minutes).
DEFAULT_REQUEST_TIMEOUT_S = 600.0
DEFAULT_HORIZON_S = 300.0


@dataclass
class _History:
    """One pool's count and when it changed (times increasing)."""

    count: int = 0
    times: list[float] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    forgotten_before: float = -math.inf  # changes before this time were dropped

    def change(self, at: float, delta: int, horizon: float) -> None:
        if self.times and at < self.times[-1]:
            at = self.times[-1]  # the wall clock stepped back: the times stay in order
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


@dataclass(frozen=True)
class Others:
    """A pool's requests when they were measured, less this Scheduler's then."""

    then: float  # never below 0
    mine_then: int


class Ticket:
    """One request handed to a pool; `OwnRequests.finished` takes it back."""

    __slots__ = ("number", "proxy_id", "sent_at", "state")

    def __init__(self, number: int, proxy_id: str, sent_at: float) -> None:
        self.number = number
        self.proxy_id = proxy_id
        self.sent_at = sent_at
        self.state = "in_flight"  # then "finished" or "expired"

    def __repr__(self) -> str:
        return f"Ticket({self.number}, {self.proxy_id!r}, {self.state})"


class OwnRequests:
    """Counts the requests this Scheduler sent to each pool and has not seen finish.

    Call `sent` when a request is handed to a pool and `finished` with its ticket once
    its answer has ended (or failed). A pool with nothing in flight and no change
    within the horizon is forgotten, so the state is bounded by the pools in use.
    """

    def __init__(self, horizon_s: float = DEFAULT_HORIZON_S,
                 clock: Callable[[], float] = time.time, *,
                 request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S) -> None:
        if not horizon_s > 0:
            raise ValueError("horizon_s must be > 0")
        if not request_timeout_s > 0:
            raise ValueError("request_timeout_s must be > 0")
        self._horizon = horizon_s
        self._timeout = request_timeout_s
        self._clock = clock
        self._pools: dict[str, _History] = {}
        self._open: dict[int, Ticket] = {}  # in sending order: the oldest first
        self._numbers = itertools.count()
        self._swept_at = -math.inf
        self.expired = 0  # requests forgotten after request_timeout_s without finished()

    def sent(self, proxy_id: str) -> Ticket:
        now = self._clock()
        self.expire(now)
        ticket = Ticket(next(self._numbers), proxy_id, now)
        self._open[ticket.number] = ticket
        self._change(proxy_id, +1, now)
        return ticket

    def finished(self, ticket: Ticket) -> bool:
        """False when the ticket had already expired (it was counted then)."""
        if ticket.state == "expired":
            return False
        if ticket.state != "in_flight" or self._open.pop(ticket.number, None) is None:
            raise ValueError(f"finished() twice, or for another OwnRequests: {ticket!r}")
        ticket.state = "finished"
        self._change(ticket.proxy_id, -1, self._clock())
        return True

    def expire(self, now: float) -> None:
        """Forget the requests sent `request_timeout_s` before `now` and not finished
        (each counted in `expired`), and every pool idle for the horizon."""
        cutoff = now - self._timeout
        while self._open:
            oldest = next(iter(self._open.values()))
            if oldest.sent_at >= cutoff:
                break
            del self._open[oldest.number]
            oldest.state = "expired"
            self.expired += 1
            self._change(oldest.proxy_id, -1, now)
        if now - self._swept_at > self._horizon:
            self._swept_at = now
            idle = [p for p, h in self._pools.items()
                    if h.count == 0 and h.times[-1] < now - self._horizon]
            for proxy_id in idle:
                del self._pools[proxy_id]

    def _change(self, proxy_id: str, delta: int, now: float) -> None:
        history = self._pools.get(proxy_id)
        if history is None:
            # A pool swept away had 0 in flight from a horizon before the sweep on; what
            # came before is unknown (a pool never seen is known as 0 back to there too).
            history = self._pools[proxy_id] = _History(
                forgotten_before=self._swept_at - self._horizon)
        history.change(now, delta, self._horizon)

    def pools(self) -> int:
        """How many pools' histories are held (bounded by those used within the horizon)."""
        return len(self._pools)

    def in_flight(self, proxy_id: str, at: float) -> int | None:
        """Mine in flight at `at`; None when `at` is before what is remembered (at least
        the last `horizon_s`)."""
        history = self._pools.get(proxy_id)
        if history is None:
            return None if at < self._swept_at - self._horizon else 0
        return history.at(at)

    def mine_now(self, proxy_id: str) -> int:
        self.expire(self._clock())
        return self.count(proxy_id)

    def count(self, proxy_id: str) -> int:
        """Mine in flight as last counted, without first forgetting expired requests:
        for many pools at one instant, after one `expire`."""
        history = self._pools.get(proxy_id)
        return 0 if history is None else history.count

    def others(self, pool: PoolSummary, measured_at: float | None) -> Others | None:
        """The pool's requests at `measured_at` (in flight, and in the Proxy's prepare
        and ready queues where it has them) that were not mine. None when the summary's
        inflight is unknown, or when it was measured is (None) or is past the horizon:
        a Scheduler then ranks the pool by something else, never as empty."""
        held = self.held(pool)
        if measured_at is None or held is None:
            return None
        mine_then = self.in_flight(pool.proxy_id, measured_at)
        if mine_then is None:
            return None
        return Others(max(0.0, held - mine_then), mine_then)

    def requests_with(self, proxy_id: str, others: Others, replicas: int = 1) -> float:
        """The pool's requests now: the others' as measured, plus mine now (as last
        counted: `expire` first).

        With `replicas` Schedulers sharing the traffic alike, each of the others is taken
        to have changed the pool's count since then as this one did: the others' part
        grows by (replicas - 1) times my change, never below 0."""
        mine_now = self.count(proxy_id)
        changed = others.then + (replicas - 1) * (mine_now - others.mine_then)
        return max(0.0, changed) + mine_now

    def requests_now(self, pool: PoolSummary, measured_at: float | None,
                     replicas: int = 1) -> float | None:
        """`requests_with` the others of a summary measured at `measured_at`; None when
        they are unknown (`others`)."""
        self.expire(self._clock())
        known = self.others(pool, measured_at)
        return None if known is None else self.requests_with(pool.proxy_id, known, replicas)

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


def measured_at(pool: PoolSummary, snapshot: BridgeSnapshot, received_at: float) -> float | None:
    """When the pool's inflight was measured, on the clock `received_at` was read from.

    The snapshot's age (the bridge's `X-Poolscope-Age-S`: its clock against the rules'
    evaluation) plus how long before that evaluation the inflight was scraped (both
    Prometheus' instants), counted back from when the snapshot arrived: no instant of
    another host is compared with this one. Without the rules' instant (an older
    bridge) it counts back from `generated_at`; without the scrape's, from the
    evaluation (up to one scrape interval late: docs/scheduling.md has what that
    costs). None when the snapshot's age is unknown."""
    if snapshot.age_s is None:
        return None
    evaluated = snapshot.generated_at if snapshot.rollups_at is None else snapshot.rollups_at
    sampled = pool.load.inflight_sampled_at
    before = 0.0 if sampled is None else max(0.0, evaluated - sampled)
    return received_at - snapshot.age_s - before
