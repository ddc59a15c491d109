"""Picks a pool for each request: the decision the closed loop measured, as code.

    picker = PoolPicker(capacities={"pool-a": 8, "pool-b": 4}, replicas=3)
    await picker.refresh(client)              # every second or so (the bridge's TTL)
    picker.report_received(receive_report(body, time.time()))   # a Proxy's heartbeat
    placement = picker.pick()                 # per request; raises NoDecision
    ...send the request to placement.proxy_id...
    picker.finished(placement, refused=status in (429, 503))

Each pool is ranked by its requests now over its capacity, the request being placed
counted: the others' requests as last measured, plus this Scheduler's own count now
(OwnRequests), least first, ties at random. The fallback chain, first that applies:

1. `report`: the pool's load report, measured within `report_max_age_s` (by its own
   age, anchored on its receipt): the others' load about one heartbeat old.
2. `summary`: the bridge's summary, the last one received while it is younger than
   `summary_max_age_s` (the bridge's own --stale-after), also through an outage of
   the bridge: the others' part ages, this Scheduler's own count stays exact.
3. `own_count`: nothing of the others is known for any accepting pool: rank by this
   Scheduler's own count over the capacity last measured (else the configured one), as
   if the others shared the pools alike.

A pool with no estimate while another has one is skipped, never taken as empty. A pool
that is asleep or draining, has a measured capacity of 0, or refused a request within
`refusal_backoff_s` is not placed on while another pool is accepting.
docs/scheduling.md measures each step, and the options (`replicas`, `choices`).
"""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from poolscope.scheduler_bridge.client import (
    BridgeError,
    BridgeSnapshot,
    PoolSummary,
    SchedulerBridgeClient,
)
from poolscope.scheduler_bridge.load_report import LoadReport
from poolscope.scheduler_bridge.own_requests import (
    DEFAULT_REQUEST_TIMEOUT_S,
    Others,
    OwnRequests,
    Ticket,
    measured_at,
)

# Three heartbeats of one second: one missed heartbeat is no reason to fall back.
REPORT_MAX_AGE_S = 3.0
# The Scheduler bridge's default --stale-after: past it the bridge refuses too.
SUMMARY_MAX_AGE_S = 30.0
REFUSAL_BACKOFF_S = 5.0
# Admission states (contract/catalog.py ADMISSION_STATES) a pool takes no
# request in: asleep answers with zeros and serves nothing; draining is on its way out.
NOT_ACCEPTING = frozenset({"asleep", "draining"})


class NoDecision(Exception):
    """No pool can be picked: none is known, or none is accepting requests."""


class Basis(StrEnum):
    """Which step of the fallback chain placed a request."""

    REPORT = "report"
    SUMMARY = "summary"
    OWN_COUNT = "own_count"


@dataclass(frozen=True)
class Placement:
    proxy_id: str
    basis: Basis
    ticket: Ticket


@dataclass
class PickerStats:
    """What a Scheduler exports about its picker (all counters but `last_bridge_error`)."""

    placed: Counter[Basis] = field(default_factory=Counter)
    refused: int = 0  # requests a pool refused (finished with refused=True)
    bridge_errors: int = 0
    last_bridge_error: str | None = None
    no_decision: int = 0


class _Candidate(NamedTuple):
    """A pool that takes requests, for one decision."""

    proxy_id: str
    capacity: float
    score: float | None  # (requests now + 1) / capacity; None: no estimate
    basis: Basis | None  # where the others' part of the score comes from
    refused: bool  # refused a request lately


@dataclass(slots=True)
class _Measured:
    """One pool as last measured, worked out once when the measurement arrives: each
    pick then adds only this Scheduler's own count now."""

    others: Others
    until: float  # too old to rank on from then (this Scheduler's clock)


@dataclass(slots=True)
class _Said:
    """What a pool last said of itself, whatever the age: kept while nothing fresh is,
    so a pool asleep or of no capacity stays out when the bridge goes quiet."""

    capacity: float | None = None  # the last measured one (a 0 included)
    state: str | None = None  # the last admission state stated
    # Until when the pool's last report keeps it known (a pool of the summary is known
    # while it is in the summary).
    heard_until: float = -math.inf


_NOTHING_SAID = _Said()  # a pool only configured


class PoolPicker:
    """The decision for one Scheduler replica; not thread-safe (one event loop)."""

    def __init__(self, capacities: Mapping[str, float] | None = None, *,
                 replicas: int = 1, choices: int | None = None,
                 report_max_age_s: float = REPORT_MAX_AGE_S,
                 summary_max_age_s: float = SUMMARY_MAX_AGE_S,
                 refusal_backoff_s: float = REFUSAL_BACKOFF_S,
                 request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
                 rng: random.Random | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        """`capacities`: the pools and their configured capacity, if the Scheduler knows
        them (the summary's pools are picked from as well). `replicas`: how many
        Scheduler replicas share the traffic alike. `choices`: None ranks every pool;
        2 is power of two choices on the same score (drawn by capacity)."""
        if replicas < 1:
            raise ValueError(f"replicas must be >= 1, not {replicas!r}")
        if choices is not None and choices < 2:
            raise ValueError(f"choices must be None or >= 2, not {choices!r}")
        for name, value in (("report_max_age_s", report_max_age_s),
                            ("summary_max_age_s", summary_max_age_s),
                            ("refusal_backoff_s", refusal_backoff_s)):
            if not value >= 0:
                raise ValueError(f"{name} must be >= 0, not {value!r}")
        if capacities and not all(c > 0 for c in capacities.values()):
            raise ValueError("configured capacities must be > 0")
        self._configured = dict(capacities or {})
        self.replicas = replicas
        self._choices = choices
        self._report_max_age = report_max_age_s
        self._summary_max_age = summary_max_age_s
        self._backoff = refusal_backoff_s
        self._rng = rng or random.Random()
        self._clock = clock
        self.own = OwnRequests(clock=clock, request_timeout_s=request_timeout_s)
        self.stats = PickerStats()
        self._summary: dict[str, _Measured] = {}
        self._reports: dict[str, _Measured] = {}
        self._refused_until: dict[str, float] = {}
        # Every pool of the last summary or heard from within report_max_age_s: bounded
        # by the pools now (`_forget`).
        self._said: dict[str, _Said] = {}
        self._summary_pools: frozenset[str] = frozenset()

    # --- what the Scheduler hands in -------------------------------------------------

    def summary_received(self, snapshot: BridgeSnapshot, received_at: float | None = None
                         ) -> None:
        received_at = self._clock() if received_at is None else received_at
        self._summary_pools = frozenset(snapshot.pools)
        self._forget(received_at)  # a pool that left the summary, unless it reports
        for pool in snapshot.pools.values():
            self._remember(pool)
        if snapshot.age_s is None:  # nothing to age it by: what it says, no estimate
            self._summary = {}
            return
        until = received_at - snapshot.age_s + self._summary_max_age
        self._summary = {}
        for p, pool in snapshot.pools.items():
            measured = self._measure(pool, measured_at(pool, snapshot, received_at), until)
            if measured is not None:
                self._summary[p] = measured

    def summary_failed(self, error: Exception) -> None:
        """The bridge gave nothing: the held snapshot keeps ageing until too old."""
        self.stats.bridge_errors += 1
        self.stats.last_bridge_error = str(error)

    async def refresh(self, client: SchedulerBridgeClient) -> bool:
        """Read the bridge once; whether a snapshot came (an error is counted)."""
        try:
            snapshot = await client.snapshot()
        except BridgeError as e:
            self.summary_failed(e)
            return False
        self.summary_received(snapshot)
        return True

    def report_received(self, report: LoadReport) -> None:
        """A pool's load report (scheduler_bridge.load_report.receive_report); an older
        one than the report held is ignored."""
        held = self._reports.get(report.proxy_id)
        until = report.measured_at + self._report_max_age
        if held is not None and until < held.until:
            return
        if report.proxy_id not in self._said:
            # A pool not held yet: what the pools that stopped reporting left goes first,
            # so a Scheduler that receives reports and picks nothing does not keep them.
            self._forget(self._clock())
        said = self._remember(report.pool)
        said.heard_until = max(said.heard_until, until)
        measured = self._measure(report.pool, report.measured_at, until)
        if measured is None:
            self._reports.pop(report.proxy_id, None)
        else:
            self._reports[report.proxy_id] = measured

    def _measure(self, pool: PoolSummary, when: float | None, until: float
                 ) -> _Measured | None:
        """What the measurement says of the others' requests; None when nothing."""
        others = self.own.others(pool, when)
        return None if others is None else _Measured(others, until)

    def _remember(self, pool: PoolSummary) -> _Said:
        said = self._said.setdefault(pool.proxy_id, _Said())
        if pool.load.capacity is not None:
            said.capacity = pool.load.capacity
        if pool.health.pool_admission_state is not None:
            said.state = pool.health.pool_admission_state
        return said

    def _forget(self, now: float) -> None:
        """Drop the reports too old to rank on, the refusals past their backoff, and what
        a pool said of itself once neither the summary nor a report holds it: a pool
        that was deleted, or whose Proxy stopped reporting, is not kept for ever."""
        for proxy_id in [p for p, m in self._reports.items() if m.until < now]:
            del self._reports[proxy_id]
        for proxy_id in [p for p, said in self._said.items()
                         if said.heard_until < now and p not in self._summary_pools]:
            del self._said[proxy_id]
        for proxy_id in [p for p, t in self._refused_until.items() if t <= now]:
            del self._refused_until[proxy_id]

    # --- the decision ----------------------------------------------------------------

    def pick(self) -> Placement:
        """The pool for one request, its ticket taken; raises NoDecision."""
        now = self._clock()
        self.own.expire(now)
        pools = self._pools(now)
        accepting = [c for c in pools if not c.refused] or pools
        capacities = {c.proxy_id: c.capacity for c in accepting}
        scores = {c.proxy_id: c.score for c in accepting if c.score is not None}
        if scores:
            proxy_id = self._best(scores, capacities)
            basis = next(c.basis for c in accepting if c.proxy_id == proxy_id) or Basis.SUMMARY
        else:
            count = self.own.count
            scores = {p: (count(p) + 1) / capacity for p, capacity in capacities.items()}
            if not scores:
                self.stats.no_decision += 1
                raise NoDecision("no pool is accepting requests" if self._known() else
                                 "no pool is known: no capacities configured, no summary, "
                                 "no load report")
            proxy_id, basis = self._best(scores, capacities), Basis.OWN_COUNT
        self.stats.placed[basis] += 1
        return Placement(proxy_id, basis, self.own.sent(proxy_id))

    def finished(self, placement: Placement, *, refused: bool = False) -> None:
        """The request's answer ended (or failed). `refused`: the pool turned it away
        (429, 503): it is not placed on for `refusal_backoff_s` while others accept."""
        self.own.finished(placement.ticket)
        if refused:
            self.stats.refused += 1
            self._refused_until[placement.proxy_id] = self._clock() + self._backoff

    def _known(self) -> bool:
        return bool(self._configured or self._said)

    def _pools(self, now: float) -> list[_Candidate]:
        """Every pool that takes requests. Its score counts the request being placed, so
        a large pool and a small one at the same ratio are told apart."""
        self._forget(now)
        summary = self._summary
        if summary and next(iter(summary.values())).until < now:
            summary = self._summary = {}
        requests_with, replicas, reports = self.own.requests_with, self.replicas, self._reports
        pools = []
        for proxy_id in {*self._configured, *self._said}:
            report, summed = reports.get(proxy_id), summary.get(proxy_id)
            # The last measured capacity (a report may carry none: a gateway's, and a
            # summary may be too old to rank on), else the configured one.
            said = self._said.get(proxy_id, _NOTHING_SAID)
            capacity = (said.capacity if said.capacity is not None
                        else self._configured.get(proxy_id))
            if not capacity or said.state in NOT_ACCEPTING:
                continue
            basis, measured = ((Basis.REPORT, report) if report is not None
                               else (Basis.SUMMARY, summed))
            score = (None if measured is None else
                     (requests_with(proxy_id, measured.others, replicas) + 1) / capacity)
            pools.append(_Candidate(proxy_id, capacity, score, basis if score is not None
                                    else None, proxy_id in self._refused_until))
        return pools

    def _best(self, scores: Mapping[str, float], capacities: Mapping[str, float]) -> str:
        among = list(scores)
        if self._choices is not None and len(among) > self._choices:
            weights = [capacities[p] for p in among]
            drawn: list[str] = []
            while len(drawn) < self._choices:
                i = self._rng.choices(range(len(among)), weights)[0]
                drawn.append(among.pop(i))
                weights.pop(i)
            among = drawn
        best = min(scores[p] for p in among)
        return self._rng.choice(sorted(p for p in among if scores[p] == best))
