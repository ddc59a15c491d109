"""The ranges a count or capacity read from another program's page must fall in.

A number an engine or a gateway states is taken as measured only while it is
one that a deployment can have: a TensorRT-LLM max batch of 1e12, a llama.cpp
`total_slots` of a billion or an InferencePool of 1e12 ready pods is a corrupt or
hostile page, and read as measured it would make the pool look idle (load over
an absurd capacity) or enormous. A value outside its range fails the read with
reason `invalid_value`, naming the series and the value, as NaN or a negative
count already does. The bounds are far above any real deployment, so an operator
can defend each, and they live here alone: the Instance exporter's engine and
`/props` readers and the gateway adapters read them from this module, and
docs/reliability.md ("Plausible ranges") lists them (a test keeps it in step).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from poolscope.exporters.common.health import ErrorReason
from poolscope.exporters.common.sampling import SampleError

# Requests one Instance could run at once, far above any engine's batch limit
# (vLLM's max_num_seqs is in the hundreds, llama.cpp's slots in the tens).
MAX_INSTANCE_REQUESTS = 100_000
# Requests one Instance could hold waiting besides: ten times what it can run.
MAX_INSTANCE_QUEUE = 1_000_000
# Instances in one pool: an InferencePool or a router's pool is tens to thousands.
MAX_POOL_MEMBERS = 100_000
# Requests a whole pool could hold, running or waiting: its members times what one
# Instance can run.
MAX_POOL_REQUESTS = MAX_POOL_MEMBERS * MAX_INSTANCE_REQUESTS


@dataclass(frozen=True)
class Range:
    """The values a number of one kind can take; `whole` for counts of things."""

    what: str  # what the numbers are, for the docs table
    low: float
    high: float
    whole: bool

    def holds(self, value: float) -> bool:
        try:
            number = float(value)
        except OverflowError:  # an integer past any float, as JSON may give one
            return False
        return (math.isfinite(number) and self.low <= number <= self.high
                and (not self.whole or number.is_integer()))

    def check(self, series: str, value: float) -> None:
        """Raise SampleError(invalid_value) naming `series` and `value` unless it holds."""
        if not self.holds(value):
            raise SampleError(ErrorReason.INVALID_VALUE,
                              f"{series[:_QUOTED]} = {value!r}, not {self}")

    def __str__(self) -> str:
        kind = "a whole number" if self.whole else "a finite number"
        if math.isinf(self.high):
            return f"{kind} from {self.low:,.0f} up"
        return f"{kind} from {self.low:,.0f} to {self.high:,.0f}"


RUNNING = Range("requests running on one Instance, and the limit it states on its page "
                "(TensorRT-LLM's max batch; 0 before its first statistics)",
                0, MAX_INSTANCE_REQUESTS, whole=True)
SLOTS = Range("the slots llama.cpp's /props states (`total_slots`)",
              1, MAX_INSTANCE_REQUESTS, whole=True)
QUEUED = Range("requests waiting at one Instance, and a gateway's requests in flight to "
               "one endpoint (running or waiting there)", 0, MAX_INSTANCE_QUEUE, whole=True)
MEMBERS = Range("Instances of one pool (a gateway's ready or listed endpoints)",
                0, MAX_POOL_MEMBERS, whole=True)
POOL_REQUESTS = Range("requests of one pool in flight or queued at its gateway",
                      0, MAX_POOL_REQUESTS, whole=True)
RATIO = Range("a fraction (KV cache usage)", 0, 1, whole=False)
FLAG = Range("a 0/1 state (awake, stale, breaker open)", 0, 1, whole=True)
AMOUNT = Range("a counter since the process started (requests, tokens)",
               0, math.inf, whole=False)

# How much of a series' name and labels a failure quotes: labels are another program's.
_QUOTED = 200

# Every range, in the order docs/reliability.md lists them.
RANGES = (RUNNING, SLOTS, QUEUED, MEMBERS, POOL_REQUESTS, RATIO, FLAG, AMOUNT)
