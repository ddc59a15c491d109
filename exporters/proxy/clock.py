"""The two clocks the Proxy exporter reads, behind one seam.

Ages (heartbeat age, idle time, oldest queued request) are differences of a
monotonic clock, so a wall-clock step can never make an Instance look alive or
idle; timestamps published for people come from the wall clock. Tests replace
both with a clock they advance by hand, so liveness timeouts are checked
without sleeping.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def time(self) -> float: ...


class SystemClock:
    """The process clocks: `time.monotonic()` for ages, `time.time()` for timestamps."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()


SYSTEM_CLOCK: Clock = SystemClock()
