"""Whether anything grew with the members that ever existed.

A figure bounded by the members alive now is flat once the fleet has turned over once
and every bound has had time to forget what left (the warm-up); one that keeps
something of every member that ever existed grows as they accumulate. So each figure's
median over the run's last quarter is compared with its median over the warm-up window,
against a ratio bound, beside the same ratio for the members that ever existed: a
figure that grew with them shows a ratio near theirs, a bounded one stays near 1.
Medians, so that one slow scrape or a replacement caught half-done moves nothing.

A figure that remembers departed members for a fixed time the soak cannot compress (the
Proxy bridge lists a member for MEMBER_MEMORY after it stopped answering) has its
warm-up start once that time has passed; in a run too short for that, the figure is
recorded but not judged, and the verdict says so.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench.churn.probe import NOT_JUDGED, Sample

FLEET = "fleet"  # the component whose figures are the fleet's own counts
MEMBERS_EVER, MEMBERS_ALIVE = "members_ever", "members_alive"
POOLS_EVER, POOLS_ALIVE = "pools_ever", "pools_alive"


@dataclass(frozen=True)
class Windows:
    """Seconds since the fleet was up: [warmup_from, warmup_to] and [end_from, end_to]."""

    warmup_from: float
    warmup_to: float
    end_from: float
    end_to: float

    @classmethod
    def of(cls, settled_s: float, duration_s: float) -> Windows:
        """The warm-up is the first quarter of what follows `settled_s`; the end is the
        run's last quarter."""
        return cls(settled_s, settled_s + (duration_s - settled_s) / 4,
                   duration_s * 3 / 4, duration_s)


@dataclass(frozen=True)
class Figure:
    component: str
    figure: str
    windows: Windows
    warmup: float | None  # median over the warm-up window; None: never read in it
    end: float | None

    @property
    def judged(self) -> bool:
        """Whether its warm-up window ends before the end window begins."""
        return self.windows.warmup_to <= self.windows.end_from

    @property
    def ratio(self) -> float:
        if self.warmup is None or self.end is None:
            return math.inf
        if self.warmup == 0:
            return 1.0 if self.end == 0 else math.inf
        return self.end / self.warmup

    def label(self) -> str:
        return f"{self.component} {self.figure}"


@dataclass(frozen=True)
class Verdict:
    windows: Windows  # the fleet's, and every figure's without a memory of its own
    bound: float
    figures: tuple[Figure, ...]  # every component's, judged or not
    fleet: tuple[Figure, ...]  # members and pools, ever and alive

    @property
    def judged(self) -> tuple[Figure, ...]:
        return tuple(f for f in self.figures if f.judged)

    @property
    def grew(self) -> tuple[Figure, ...]:
        return tuple(f for f in self.judged if not f.ratio <= self.bound)

    @property
    def passed(self) -> bool:
        return bool(self.judged) and not self.grew

    def fleet_figure(self, name: str) -> Figure:
        return next(f for f in self.fleet if f.figure == name)


def _median(samples: Sequence[Sample], start: float, stop: float) -> float | None:
    values = [s.value for s in samples if start <= s.t_s <= stop]
    return statistics.median(values) if values else None


def judge(samples: Sequence[Sample], settled_s: float, duration_s: float, bound: float,
          memory_s: Callable[[str, str], float] = lambda component, figure: 0.0) -> Verdict:
    """Every figure but the uncompared counters, each with its warm-up from `settled_s`
    or from its own `memory_s(component, figure)`, whichever is later."""
    series: dict[tuple[str, str], list[Sample]] = {}
    for s in samples:
        series.setdefault((s.component, s.figure), []).append(s)
    windows = Windows.of(settled_s, duration_s)
    figures = []
    for (component, figure), these in sorted(series.items()):
        if figure in NOT_JUDGED:
            continue
        own = (windows if component == FLEET else
               Windows.of(max(settled_s, memory_s(component, figure)), duration_s))
        figures.append(Figure(component, figure, own,
                              _median(these, own.warmup_from, own.warmup_to),
                              _median(these, own.end_from, own.end_to)))
    return Verdict(windows, bound,
                   tuple(f for f in figures if f.component != FLEET),
                   tuple(f for f in figures if f.component == FLEET))
