"""One snapshot per TTL, shared by every request, and honest about its age.

A Scheduler fleet may ask many times a second; Prometheus should see one query per
TTL however many ask at once (single flight). When every backend fails, the last
good snapshot is still the truth about the recent past, so it is served, marked
stale, with its age, until it is older than `stale_after`; after that the bridge
says it does not know (Unavailable) rather than serve an old value as current.
A failed refresh is remembered for the TTL too, so a dead backend is not hammered.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from scheduler_bridge.metrics import BridgeMetrics
from scheduler_bridge.promapi import AllBackendsFailed, BackendError
from scheduler_bridge.summary import PoolSnapshot

log = logging.getLogger(__name__)

Refresh = Callable[[float], Awaitable[PoolSnapshot]]
# How long a replaced snapshot is kept after its successor is in place.
RETIRE_AFTER_S = 0.05


@dataclass(frozen=True)
class Served:
    snapshot: PoolSnapshot
    stale: bool
    age_s: float


class Unavailable(Exception):
    """No snapshot young enough to serve; names what failed."""

    def __init__(self, errors: Sequence[BackendError], last_good_age_s: float | None) -> None:
        causes = "; ".join(str(e) for e in errors) or "no successful query yet"
        super().__init__(causes)
        self.errors = tuple(errors)
        self.last_good_age_s = last_good_age_s


class SnapshotCache:
    def __init__(self, refresh: Refresh, *, ttl_s: float, stale_after_s: float,
                 metrics: BridgeMetrics, clock: Callable[[], float] = time.time) -> None:
        self._refresh = refresh
        self._ttl = ttl_s
        self._stale_after = stale_after_s
        self._metrics = metrics
        self._clock = clock
        self._good: PoolSnapshot | None = None
        self._failure: AllBackendsFailed | None = None
        self._attempted_at: float | None = None
        self._inflight: asyncio.Task[None] | None = None

    async def get(self) -> Served:
        """The snapshot to serve now; raises Unavailable when there is none."""
        if self._inflight is not None:
            self._metrics.cache.labels("shared").inc()
        elif self._attempted_at is not None and self._clock() - self._attempted_at < self._ttl:
            self._metrics.cache.labels("hit").inc()
            return self._outcome()
        else:
            self._metrics.cache.labels("miss").inc()
            self._inflight = asyncio.create_task(self._run_refresh())
        # shield: a client hanging up must not cancel the refresh others wait for.
        await asyncio.shield(self._inflight)
        return self._outcome()

    async def _run_refresh(self) -> None:
        # Prometheus evaluates at millisecond precision: report exactly that time.
        at = round(self._clock(), 3)
        try:
            snapshot = await self._refresh(at)
        except AllBackendsFailed as e:
            self._failure = e
            self._metrics.refreshes.labels("error").inc()
        except Exception as e:
            # A bug must not turn into serving the previous snapshot as fresh.
            log.exception("refresh at %s failed", at)
            self._failure = AllBackendsFailed([BackendError("bridge", "internal", repr(e))])
            self._metrics.refreshes.labels("error").inc()
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

    def _outcome(self) -> Served:
        good = self._good
        age = None if good is None else max(0.0, self._clock() - good.generated_at)
        if good is not None and age is not None:
            if self._failure is None:
                return Served(good, False, age)
            if age <= self._stale_after:
                return Served(good, True, age)
        raise Unavailable(self._failure.errors if self._failure else (), age)


def _release(retired: PoolSnapshot | None) -> None:
    """Nothing to do: the timer held `retired`, and lets go of it once this has run."""
