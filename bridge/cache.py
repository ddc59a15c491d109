"""One snapshot per evaluation of the rules, shared by every request, honest about its age.

The rules write new rollups once per evaluation interval; reading every pool more
often re-reads the same data. So after a full read whose rollups were written at T,
the next one is not needed before T + the evaluation interval; from then on a probe
(the rollups' timestamp alone, one sample) asks at most once per TTL whether they
moved, and only a move (or a failed last attempt) pays for a full read. A Scheduler
fleet may ask many times a second; Prometheus sees one probe or read at a time
however many ask at once (single flight).

A snapshot's age is that of its rollups, from their own timestamps: Prometheus may
answer at once with samples its rules wrote long ago. When every backend fails, the
last good snapshot is still the truth about the recent past, so it is served, marked
stale, with its age; so is one whose rollups are older than `fresh_for`, and the last
snapshot while a probe or read is late (after `answer_within`: a hung backend must
not hold every request for its timeout). Older than `stale_after`, the bridge says it
does not know (Unavailable) rather than serve an old value as current. A failure is
remembered for the TTL too, so a dead backend is not hammered.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from poolscope.bridge.metrics import BridgeMetrics
from poolscope.bridge.promapi import AllBackendsFailed, BackendError
from poolscope.bridge.summary import PoolSnapshot

log = logging.getLogger(__name__)

Refresh = Callable[[float], Awaitable[PoolSnapshot]]
# When the rules last wrote the rollups, asked at a time (None: not readable).
Probe = Callable[[float], Awaitable[float | None]]
# How long a replaced snapshot is kept after its successor is in place.
RETIRE_AFTER_S = 0.05


@dataclass(frozen=True)
class Source:
    """What the cache reads: every pool in full, or only when the rules last wrote."""

    read: Refresh
    written_at: Probe


@dataclass(frozen=True)
class Served:
    snapshot: PoolSnapshot
    stale: bool
    age_s: float
    # Until the rules are next due to write: how long an answer from this snapshot
    # stays current (0 when stale, or once they are due).
    current_for_s: float


class Unavailable(Exception):
    """No snapshot young enough to serve; says why and names what failed."""

    def __init__(self, reason: str, errors: Sequence[BackendError],
                 last_good_age_s: float | None) -> None:
        causes = "; ".join(str(e) for e in errors)
        super().__init__(f"{reason}: {causes}" if causes else reason)
        self.reason = reason
        self.errors = tuple(errors)
        self.last_good_age_s = last_good_age_s


class SnapshotCache:
    def __init__(self, source: Source, *, ttl_s: float, evaluation_interval_s: float,
                 stale_after_s: float, fresh_for_s: float, answer_within_s: float,
                 metrics: BridgeMetrics, clock: Callable[[], float] = time.time) -> None:
        self._source = source
        self._ttl = ttl_s
        self._interval = evaluation_interval_s
        self._stale_after = stale_after_s
        self._fresh_for = fresh_for_s
        self._answer_within = answer_within_s
        self._metrics = metrics
        self._clock = clock
        self._good: PoolSnapshot | None = None
        self._failure: AllBackendsFailed | None = None
        self._attempted_at: float | None = None
        self._inflight: asyncio.Task[None] | None = None
        self._inflight_since = 0.0  # loop time: immune to the wall clock's steps

    async def get(self) -> Served:
        """The snapshot to serve now; raises Unavailable when there is none."""
        loop = asyncio.get_running_loop()
        if self._inflight is not None:
            self._metrics.cache.labels("shared").inc()
        elif not self._due(self._clock()):
            self._metrics.cache.labels("hit").inc()
            return self._outcome()
        else:
            self._metrics.cache.labels("miss").inc()
            self._inflight = asyncio.create_task(self._run_refresh())
            self._inflight_since = loop.time()
        # shield: a client hanging up must not cancel the refresh others wait for.
        inflight = asyncio.shield(self._inflight)
        if self._good is None:
            await inflight  # nothing to serve meanwhile
            return self._outcome()
        wait = self._answer_within - (loop.time() - self._inflight_since)
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for drops a client's
            # cancellation when the refresh ends at the same moment.
            async with asyncio.timeout(max(wait, 0.0)):
                await inflight
        except TimeoutError:
            self._metrics.cache.labels("late").inc()
            return self._outcome(late=True)
        return self._outcome()

    def _due(self, now: float) -> bool:
        """Whether to ask a backend now: a TTL 0 always does; otherwise not within a
        TTL of the last attempt, nor before the rules are due to write again (unless a
        query of the last snapshot failed: that one is read again at the next TTL)."""
        if self._attempted_at is None or self._ttl == 0:
            return True
        if now - self._attempted_at < self._ttl:
            return False
        good = self._good
        return (self._failure is not None or good is None or good.rollups_at is None
                or good.failed_queries > 0 or now >= good.rollups_at + self._interval)

    async def _run_refresh(self) -> None:
        # Prometheus evaluates at millisecond precision: report exactly that time.
        at = round(self._clock(), 3)
        outcomes = self._metrics.probes  # whichever step fails counts the error
        try:
            if await self._unchanged(at):
                return
            outcomes = self._metrics.refreshes
            snapshot = await self._source.read(at)
        except AllBackendsFailed as e:
            self._failure = e
            outcomes.labels("error").inc()
        except Exception as e:
            # A bug must not turn into serving the previous snapshot as fresh.
            log.exception("refresh at %s failed", at)
            self._failure = AllBackendsFailed([BackendError("bridge", "internal", repr(e))])
            outcomes.labels("error").inc()
        else:
            retired, self._good, self._failure = self._good, snapshot, None
            # Freeing the replaced snapshot (1,000 pools: ~2 ms) would delay every request
            # waiting for this one; it is freed once they have been answered.
            asyncio.get_running_loop().call_later(RETIRE_AFTER_S, _release, retired)
            self._metrics.refreshes.labels("partial" if snapshot.failed_queries else "ok").inc()
            self._metrics.observe_snapshot(len(snapshot.pools), snapshot.series,
                                           snapshot.rejected)
        finally:
            self._attempted_at = at
            self._inflight = None

    async def _unchanged(self, at: float) -> bool:
        """True when a probe shows the rules wrote nothing since the snapshot's rollups:
        no full read is needed. Without a snapshot whose rollups' age is known, after a
        failed attempt or a snapshot with a failed query, or with a TTL 0 it reads in
        full without asking. Any other
        timestamp (an HA partner's rules run at their own times) is a move."""
        good = self._good
        if (good is None or good.rollups_at is None or self._failure is not None
                or good.failed_queries > 0 or self._ttl == 0):
            return False
        unchanged = await self._source.written_at(at) == good.rollups_at
        self._metrics.probes.labels("unchanged" if unchanged else "moved").inc()
        return unchanged

    def _outcome(self, *, late: bool = False) -> Served:
        good = self._good
        errors = self._failure.errors if self._failure else ()
        if good is None:
            raise Unavailable("no snapshot yet: every backend failed", errors, None)
        measured_at = good.generated_at if good.rollups_at is None else good.rollups_at
        age = max(0.0, self._clock() - measured_at)
        if age > self._stale_after:
            if self._failure:
                reason = "no snapshot younger than --stale-after: every backend failed"
            elif late:
                reason = ("no snapshot younger than --stale-after, and the refresh in "
                          "flight has not been answered within --answer-within")
            else:
                reason = (f"the rollups were written {age:.1f} s ago, over --stale-after: "
                          "Prometheus answers, but its rules have not run since")
            raise Unavailable(reason, errors, age)
        stale = (late or self._failure is not None or good.rollups_at is None
                 or age > self._fresh_for)
        return Served(good, stale, age, 0.0 if stale else max(0.0, self._interval - age))


def _release(retired: PoolSnapshot | None) -> None:
    """Nothing to do: the timer held `retired`, and lets go of it once this has run."""
