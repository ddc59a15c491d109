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

1. `report`: the pool's load report, received within `report_max_age_s`: the
   others' load about one heartbeat old.
2. `summary`: the bridge's summary, the last one received while it is younger than
   `summary_max_age_s` (the bridge's own --stale-after), also through an outage of
   the bridge: the others' part ages, this Scheduler's own count stays exact.
3. `own_count`: nothing of the others is known for any accepting pool: rank by this
   Scheduler's own count over the capacity last known (configured, else measured), as
   if the others shared the pools alike.

A pool with no estimate while another has one is skipped, never taken as empty. A pool
that is asleep or draining, has a measured capacity of 0, or refused a request within
`refusal_backoff_s` is not placed on while another pool is accepting.
docs/scheduling.md measures each step, and the options (`replicas`, `choices`).
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from poolscope.scheduler_bridge.client import (
    BridgeError,
    BridgeSnapshot,
    PoolSummary,
    SchedulerBridgeClient,
)
from poolscope.scheduler_bridge.load_report import LoadReport
from poolscope.scheduler_bridge.own_requests import (
    DEFAULT_REQUEST_TIMEOUT_S,
    OwnRequests,
    Ticket,
    measured_at,
)

# Three heartbeats of one second: one missed heartbeat is no reason to fall back.
REPORT_MAX_AGE_S = 3.0
# The Scheduler bridge's default --stale-after: past it the bridge refuses too.
SUMMARY_MAX_AGE_S = 30.0
REFUSAL_BACKOFF_S = 5.0
# Admission states (exporters/common/catalog.py ADMISSION_STATES) a pool takes no
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


@dataclass(frozen=True)
class _Pool:
    """One pool's view for one decision."""

    capacity: float | None
    score: float | None  # (requests now + 1) / capacity; None: no estimate
    basis: Basis | None
    accepting: bool
    refused: bool  # within its refusal backoff (and otherwise accepting)


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
        self._snapshot: BridgeSnapshot | None = None
        self._received_at = 0.0
        self._reports: dict[str, LoadReport] = {}
        self._refused_until: dict[str, float] = {}
        # The last capacity each pool of the summary had, for when nothing is fresh.
        self._measured_capacity: dict[str, float] = {}

    # --- what the Scheduler hands in -------------------------------------------------

    def summary_received(self, snapshot: BridgeSnapshot, received_at: float | None = None
                         ) -> None:
        self._snapshot = snapshot
        self._received_at = self._clock() if received_at is None else received_at
        # A pool that left the summary is forgotten here too (bounded by the pools now).
        self._measured_capacity = {p: c for p, c in self._measured_capacity.items()
                                   if p in snapshot.pools}
        self._remember_capacities(snapshot.pools.values())

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
        if held is None or report.measured_at >= held.measured_at:
            self._reports[report.proxy_id] = report
            self._remember_capacities((report.pool,))

    def _remember_capacities(self, pools: Iterable[PoolSummary]) -> None:
        for pool in pools:
            if pool.load.capacity:
                self._measured_capacity[pool.proxy_id] = pool.load.capacity

    # --- the decision ----------------------------------------------------------------

    def pick(self) -> Placement:
        """The pool for one request, its ticket taken; raises NoDecision."""
        now = self._clock()
        view = self._view(now)
        accepting = {p: v for p, v in view.items() if v.accepting and not v.refused}
        if not accepting:
            # Refused a moment ago, but nothing else takes requests: try again there.
            accepting = {p: v for p, v in view.items() if v.accepting}
        estimated = {p: v.score for p, v in accepting.items() if v.score is not None}
        if estimated:
            proxy_id = self._best(estimated, accepting)
            basis = accepting[proxy_id].basis or Basis.SUMMARY
        else:
            own = {p: (self.own.mine_now(p) + 1) / v.capacity
                   for p, v in accepting.items() if v.capacity}
            if not own:
                self.stats.no_decision += 1
                raise NoDecision("no pool is accepting requests" if view else
                                 "no pool is known: no capacities configured, no summary, "
                                 "no load report")
            proxy_id, basis = self._best(own, accepting), Basis.OWN_COUNT
        self.stats.placed[basis] += 1
        return Placement(proxy_id, basis, self.own.sent(proxy_id))

    def finished(self, placement: Placement, *, refused: bool = False) -> None:
        """The request's answer ended (or failed). `refused`: the pool turned it away
        (429, 503): it is not placed on for `refusal_backoff_s` while others accept."""
        self.own.finished(placement.ticket)
        if refused:
            self.stats.refused += 1
            self._refused_until[placement.proxy_id] = self._clock() + self._backoff

    def _best(self, scores: Mapping[str, float], pools: Mapping[str, _Pool]) -> str:
        among = list(scores)
        if self._choices is not None and len(among) > self._choices:
            weights = [pools[p].capacity or 1.0 for p in among]
            drawn: list[str] = []
            while len(drawn) < self._choices:
                pick = self._rng.choices(among, weights)[0]
                i = among.index(pick)
                drawn.append(among.pop(i))
                weights.pop(i)
            among = drawn
        best = min(scores[p] for p in among)
        return self._rng.choice(sorted(p for p in among if scores[p] == best))

    def _view(self, now: float) -> dict[str, _Pool]:
        snapshot = self._snapshot
        summary_pools: Mapping[str, PoolSummary] = {}
        if (snapshot is not None and snapshot.age_s is not None
                and now - self._received_at + snapshot.age_s <= self._summary_max_age):
            summary_pools = snapshot.pools
        for proxy_id in [p for p, r in self._reports.items()
                         if r.age_s(now) > self._report_max_age]:
            del self._reports[proxy_id]
        for proxy_id in [p for p, t in self._refused_until.items() if t <= now]:
            del self._refused_until[proxy_id]
        names = {*self._configured, *summary_pools, *self._reports}
        return {p: self._pool(p, summary_pools.get(p), now) for p in names}

    def _pool(self, proxy_id: str, summary: PoolSummary | None, now: float) -> _Pool:
        report = self._reports.get(proxy_id)
        sources = [p for p in (report.pool if report else None, summary) if p is not None]
        # The freshest measured capacity (a report may carry none: a gateway's), else the
        # configured one, else the last the summary had.
        capacity = next((p.load.capacity for p in sources if p.load.capacity is not None),
                        self._configured.get(proxy_id, self._measured_capacity.get(proxy_id)))
        state = next((p.health.pool_admission_state for p in sources
                      if p.health.pool_admission_state is not None), None)
        score = basis = None
        if capacity:
            if report is not None:
                score, basis = self._score(report.pool, report.measured_at, capacity), \
                    Basis.REPORT
            if score is None and summary is not None and self._snapshot is not None:
                when = measured_at(summary, self._snapshot, self._received_at)
                score, basis = self._score(summary, when, capacity), Basis.SUMMARY
        return _Pool(capacity, score, basis if score is not None else None,
                     accepting=state not in NOT_ACCEPTING and capacity != 0,
                     refused=proxy_id in self._refused_until)

    def _score(self, pool: PoolSummary, when: float | None, capacity: float) -> float | None:
        """(requests now + 1) / capacity: the request being placed counted, so a large
        pool and a small one at the same ratio are told apart."""
        requests = self.own.requests_now(pool, when, self.replicas)
        return None if requests is None else (requests + 1) / capacity
