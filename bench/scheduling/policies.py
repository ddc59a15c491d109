"""The Scheduler stand-in's policies: how it picks a pool for one request.

The baselines read only what their name says: nothing (random, round-robin), the
configured capacities (weighted), the bridge's summary as served (least load, least
saturation, power of two choices on load_ratio), or every Proxy at the moment of the
decision (oracle: the limit for this fleet's slots; oracle_time: the same counts
weighed by what a token costs in each pool, from llama.cpp's own counters). Every
policy that uses the summary with the Scheduler's own count, or the Proxies' load
reports, is the product's picker (poolscope.scheduler_bridge.picker), imported, not
restated here: the code a Scheduler runs is the code measured. A baseline skips a pool
whose value is unknown (never read as empty), falls back to capacity weights with none
known, and breaks ties at random, so no pool wins by its name.

One policy object is one Scheduler replica: it is handed every snapshot and report
that replica receives, and is told when each of its requests ends.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from poolscope.scheduler_bridge.client import BridgeError, BridgeSnapshot
from poolscope.scheduler_bridge.load_report import LoadReport
from poolscope.scheduler_bridge.picker import SUMMARY_MAX_AGE_S, Placement, PoolPicker

# The live count of requests each pool holds, read at the decision (the oracle's view);
# None where a Proxy reports no inflight.
LiveRead = Callable[[], Awaitable[Mapping[str, float | None]]]
# Called once when a placed request's answer has ended: whether the pool refused it.
Done = Callable[[bool], None]
# Seconds each pool's engines spent per generated token over the last few seconds, from
# their own counters; a pool missing from it has not been measured yet.
TokenTimes = Callable[[], Mapping[str, float]]


def _unmeasured() -> Mapping[str, float]:
    return {}


@dataclass
class View:
    """What a baseline may look at for one decision."""

    capacities: Mapping[str, int]
    rng: random.Random
    live: LiveRead
    token_times: TokenTimes = _unmeasured


def _weighted(view: View, among: Sequence[str] | None = None) -> str:
    pools = list(among or view.capacities)
    return view.rng.choices(pools, weights=[view.capacities[p] for p in pools])[0]


def _least(view: View, scores: Mapping[str, float | None]) -> str:
    known = {p: s for p, s in scores.items() if s is not None}
    if not known:
        return _weighted(view)
    best = min(known.values())
    return view.rng.choice(sorted(p for p, s in known.items() if s == best))


def _no_count(refused: bool) -> None:
    """A baseline keeps no count of its requests."""


class Policy:
    name = ""
    reads_summary = False
    reads_reports = False
    reads_engines = False  # their decode counters, in the background (view.token_times)

    def __init__(self, capacities: Mapping[str, int], replicas: int, rng: random.Random,
                 clock: Callable[[], float] = time.time) -> None:
        self.snapshot: BridgeSnapshot | None = None  # the newest this replica received

    async def place(self, view: View) -> tuple[str, Done]:
        return await self.choose(view), _no_count

    async def choose(self, view: View) -> str:
        raise NotImplementedError

    def summary_received(self, snapshot: BridgeSnapshot) -> None:
        self.snapshot = snapshot

    def summary_failed(self, error: BridgeError) -> None:
        """A baseline keeps its last snapshot."""

    def report_received(self, report: LoadReport) -> None:
        """Only the picker reads load reports."""

    def _summary_field(self, view: View, section: str, key: str) -> dict[str, float | None]:
        pools = self.snapshot.pools if self.snapshot else {}
        return {p: getattr(getattr(pools[p], section), key) if p in pools else None
                for p in view.capacities}


class Random(Policy):
    name = "random"

    async def choose(self, view: View) -> str:
        return view.rng.choice(sorted(view.capacities))


class RoundRobin(Policy):
    name = "round_robin"

    def __init__(self, capacities: Mapping[str, int], replicas: int, rng: random.Random,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(capacities, replicas, rng, clock)
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
        return _least(view, self._summary_field(view, "load", "load_ratio"))


class LeastSaturation(Policy):
    name = "least_saturation"
    reads_summary = True

    async def choose(self, view: View) -> str:
        return _least(view, self._summary_field(view, "load", "saturation"))


class PowerOfTwo(Policy):
    """Two distinct pools drawn by capacity, the less loaded one taken."""

    name = "p2c_load"
    reads_summary = True

    async def choose(self, view: View) -> str:
        first = _weighted(view)
        rest = [p for p in view.capacities if p != first]
        pair = [first, _weighted(view, rest)] if rest else [first]
        ratios = self._summary_field(view, "load", "load_ratio")
        return _least(view, {p: ratios[p] for p in pair})


class Oracle(Policy):
    """Least (requests every engine and Proxy hold now + 1) / capacity."""

    name = "oracle"

    async def choose(self, view: View) -> str:
        live = await view.live()
        return _least(view, {p: None if live[p] is None else (live[p] + 1) / c
                             for p, c in view.capacities.items()})


class OracleTime(Policy):
    """The oracle's count weighed by time: the expected time to finish a new request
    where a slot is not a unit of capacity (a llama.cpp server decodes each of 8 busy
    slots about 2.8x slower than one alone). With a slot free it decodes at the seconds
    a token takes there now (the engines' own decode counters); with none, it waits
    (requests held + 1) / capacity rounds of that. A pool not yet measured is taken at
    the slowest measured pool's time, never as free."""

    name = "oracle_time"
    reads_engines = True

    async def choose(self, view: View) -> str:
        live = await view.live()
        times = view.token_times()
        slowest = max(times.values(), default=1.0)
        return _least(view, {p: None if live[p] is None
                             else max(1.0, (live[p] + 1) / c) * times.get(p, slowest)
                             for p, c in view.capacities.items()})


class Picker(Policy):
    """The product's PoolPicker on the summary alone (each pool's load as last measured,
    plus this replica's own count), told how many replicas share the traffic."""

    name = "picker"
    reads_summary = True
    choices: int | None = None
    summary_max_age_s = SUMMARY_MAX_AGE_S

    def __init__(self, capacities: Mapping[str, int], replicas: int, rng: random.Random,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(capacities, replicas, rng, clock)
        self.picker = PoolPicker(capacities, replicas=replicas, choices=self.choices,
                                 summary_max_age_s=self.summary_max_age_s, rng=rng,
                                 clock=clock)

    async def place(self, view: View) -> tuple[str, Done]:
        placement = self.picker.pick()

        def done(refused: bool, placement: Placement = placement) -> None:
            self.picker.finished(placement, refused=refused)
        return placement.proxy_id, done

    def summary_received(self, snapshot: BridgeSnapshot) -> None:
        super().summary_received(snapshot)
        self.picker.summary_received(snapshot)

    def summary_failed(self, error: BridgeError) -> None:
        self.picker.summary_failed(error)


class PickerWithReports(Picker):
    """The picker with each Proxy's load report as its heartbeats bring it."""

    name = "picker_heartbeat"
    reads_reports = True

    def report_received(self, report: LoadReport) -> None:
        self.picker.report_received(report)


class PickerTwoChoices(Picker):
    """The picker on the summary, each decision between two pools drawn by capacity."""

    name = "picker_p2c"
    choices = 2


class PickerWithReportsTwoChoices(PickerWithReports):
    """The picker with load reports, each decision between two pools drawn by capacity."""

    name = "picker_heartbeat_p2c"
    choices = 2


class PickerOwnCount(Picker):
    """The picker's last step alone: no summary is ever young enough, so each pool is
    ranked by this replica's own count over its capacity."""

    name = "picker_own_count"
    summary_max_age_s = 0.0


class PickerUnaware(Picker):
    """The picker on the summary, not told of the other replicas (replicas=1)."""

    name = "picker_unaware"

    def __init__(self, capacities: Mapping[str, int], replicas: int, rng: random.Random,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(capacities, 1, rng, clock)


POLICIES: dict[str, type[Policy]] = {p.name: p for p in (
    Random, RoundRobin, Weighted, LeastLoad, LeastSaturation, PowerOfTwo, Oracle, OracleTime,
    Picker, PickerWithReports, PickerTwoChoices, PickerWithReportsTwoChoices, PickerOwnCount,
    PickerUnaware)}
