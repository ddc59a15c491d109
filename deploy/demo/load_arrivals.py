"""Open-loop arrival times: a Poisson process whose rate steps up during bursts.

Arrival times are a pure function of the rate, the burst pattern and the
random generator, computed before and independently of any response. That is
what makes the load open-loop: a slow or failing pool gets the same offered
load as a healthy one, as real clients would give it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class BurstSpec:
    """Every `every` seconds (first at t=every), the rate is multiplied by `factor`
    for `length` seconds. A factor below 1 makes a lull instead."""

    every: float
    factor: float
    length: float

    def __post_init__(self) -> None:
        if not (self.every > 0 and 0 < self.length < self.every):
            raise ValueError("burst needs every > 0 and 0 < length < every")
        if not (0 <= self.factor < math.inf):
            raise ValueError("burst factor must be a finite number >= 0")

    def multiplier(self, t: float) -> float:
        in_burst = t >= self.every and (t % self.every) < self.length
        return self.factor if in_burst else 1.0


def arrival_times(rate: float, rng: random.Random, burst: BurstSpec | None = None,
                  horizon: float = math.inf) -> Iterator[float]:
    """Arrival offsets in seconds from the start, increasing, all below `horizon`.

    A piecewise-constant rate is sampled by thinning (Lewis & Shedler): draw a
    homogeneous process at the peak rate and keep each point with probability
    rate(t) / peak. That is exact for any burst pattern, with no special cases
    at window edges.
    """
    if not (0 <= rate < math.inf):
        raise ValueError(f"rate must be a finite number >= 0, got {rate}")
    peak = rate * max(1.0, burst.factor if burst else 1.0)
    if peak == 0:
        return
    t = 0.0
    while True:
        t += rng.expovariate(peak)
        if t >= horizon:
            return
        if burst is None or rng.random() * peak < rate * burst.multiplier(t):
            yield t
