"""The Scheduler stand-in's policies: how it picks a pool for one request.

Each reads only what its name says: nothing (random, round-robin), the configured
capacities (weighted), the bridge's summary as a Scheduler reads it (least load,
least saturation, power of two choices, tracked), the Proxies' load reports as their
heartbeats would bring them (heartbeat), or every Proxy at the moment of the decision
(oracle: the limit for this fleet's slots). A pool whose value is
unknown is skipped, never read as empty; with none known the pick falls back to
capacity weights. Ties are broken at random, so no pool wins by its name.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from poolscope.scheduler_bridge.client import BridgeSnapshot, PoolSummary
from poolscope.scheduler_bridge.own_requests import OwnRequests, measured_at

# The live count of requests each pool holds, read at the decision (the oracle's view);
# None where a Proxy reports no inflight.
LiveRead = Callable[[], Awaitable[Mapping[str, float | None]]]


@dataclass
class View:
    """What a policy may look at for one decision."""

    capacities: Mapping[str, int]
    snapshot: BridgeSnapshot | None  # the newest the Scheduler holds, or None yet
    received_at: float  # when that snapshot arrived (wall clock)
    own: OwnRequests
    rng: random.Random
    live: LiveRead
    # The newest load report of each Proxy (its heartbeat); a missed one is absent.
    reports: Mapping[str, PoolSummary] = field(default_factory=dict)


def _weighted(view: View, among: Sequence[str] | None = None) -> str:
    pools = list(among or view.capacities)
    return view.rng.choices(pools, weights=[view.capacities[p] for p in pools])[0]


def _least(view: View, scores: Mapping[str, float | None]) -> str:
    known = {p: s for p, s in scores.items() if s is not None}
    if not known:
        return _weighted(view)
    best = min(known.values())
    return view.rng.choice(sorted(p for p, s in known.items() if s == best))


def _summary_field(view: View, section: str, key: str) -> dict[str, float | None]:
    pools = view.snapshot.pools if view.snapshot else {}
    return {p: getattr(getattr(pools[p], section), key) if p in pools else None
            for p in view.capacities}


def _tracked(view: View, scrape_time: bool) -> dict[str, float | None]:
    """Each pool's load now by OwnRequests, measured at the scrape the summary names, or
    (scrape_time False) at the rules' evaluation, as a summary without that field allows."""
    snapshot = view.snapshot
    scores: dict[str, float | None] = dict.fromkeys(view.capacities)
    if snapshot is None:
        return scores
    for p in view.capacities:
        pool = snapshot.pools.get(p)
        if pool is None:
            continue
        if not scrape_time:
            pool = replace(pool, load=replace(pool.load, inflight_sampled_at=None))
        scores[p] = view.own.load_now(pool, measured_at(pool, snapshot, view.received_at))
    return scores


class Policy:
    name = ""
    reads_summary = False
    reads_reports = False

    async def choose(self, view: View) -> str:
        raise NotImplementedError


class Random(Policy):
    name = "random"

    async def choose(self, view: View) -> str:
        return view.rng.choice(sorted(view.capacities))


class RoundRobin(Policy):
    name = "round_robin"

    def __init__(self) -> None:
        self._next = 0

    async def choose(self, view: View) -> str:
        pools = sorted(view.capacities)
        chosen = pools[self._next % len(pools)]
        self._next += 1
        return chosen


class Weighted(Policy):
    name = "weighted"

    async def choose(self, view: View) -> str:
        return _weighted(view)


class LeastLoad(Policy):
    name = "least_load"
    reads_summary = True

    async def choose(self, view: View) -> str:
        return _least(view, _summary_field(view, "load", "load_ratio"))


class LeastSaturation(Policy):
    name = "least_saturation"
    reads_summary = True

    async def choose(self, view: View) -> str:
        return _least(view, _summary_field(view, "load", "saturation"))


class PowerOfTwo(Policy):
    """Two distinct pools drawn by capacity, the less loaded one taken."""

    name = "p2c_load"
    reads_summary = True

    async def choose(self, view: View) -> str:
        first = _weighted(view)
        rest = [p for p in view.capacities if p != first]
        pair = [first, _weighted(view, rest)] if rest else [first]
        ratios = _summary_field(view, "load", "load_ratio")
        return _least(view, {p: ratios[p] for p in pair})


class Tracked(Policy):
    """Least (others' requests when the summary measured them + mine now + 1) / capacity."""

    name = "tracked"
    reads_summary = True
    scrape_time = True

    async def choose(self, view: View) -> str:
        return _least(view, _tracked(view, self.scrape_time))


class TrackedAtEvaluation(Tracked):
    """Tracked, with mine subtracted as of the rules' evaluation instead of the scrape."""

    name = "tracked_eval"
    scrape_time = False


class Heartbeat(Policy):
    """Tracked on the short path: each Proxy's load report, as its heartbeats would bring
    it every second, instead of the summary."""

    name = "heartbeat"
    reads_reports = True

    async def choose(self, view: View) -> str:
        scores: dict[str, float | None] = {}
        for p in view.capacities:
            report = view.reports.get(p)
            scores[p] = (None if report is None
                         else view.own.load_now(report, report.load.inflight_sampled_at))
        return _least(view, scores)


class Oracle(Policy):
    """Least (requests every engine and Proxy hold now + 1) / capacity."""

    name = "oracle"

    async def choose(self, view: View) -> str:
        live = await view.live()
        return _least(view, {p: None if live[p] is None else (live[p] + 1) / c
                             for p, c in view.capacities.items()})


POLICIES: dict[str, type[Policy]] = {p.name: p for p in (
    Random, RoundRobin, Weighted, LeastLoad, LeastSaturation, PowerOfTwo, Tracked,
    TrackedAtEvaluation, Heartbeat, Oracle)}
