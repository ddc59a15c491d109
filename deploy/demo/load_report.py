"""What the load generator sent to each target and what came back.

Every arrival ends in exactly one outcome, so the counts add up:
`arrivals == sent + dropped` and `sent == sum(outcomes)`. A latency
percentile over no successful request is None (absent), never 0.
"""

from __future__ import annotations

import enum
import json
import math
from collections import Counter
from dataclasses import asdict, dataclass, field


class Outcome(enum.StrEnum):
    OK = "ok"
    # The Proxy's two load signals (queue full, timed out in queue) are kept
    # apart from other failures because they are what the demo is about.
    REJECTED_503 = "rejected_503"
    TIMEOUT_504 = "timeout_504"
    OTHER_STATUS = "other_status"
    # Connection refused or reset: no HTTP answer at all.
    TRANSPORT_ERROR = "transport_error"
    # A 200 whose body was not a complete answer (bad JSON, stream without [DONE]).
    PROTOCOL_ERROR = "protocol_error"
    # No answer within the load generator's own per-request timeout.
    CLIENT_TIMEOUT = "client_timeout"
    # Still open when the run was stopped and its grace period ran out.
    ABANDONED = "abandoned"


def classify_status(status: int) -> Outcome | None:
    """The outcome an HTTP status settles by itself; None means 'read the body'."""
    if 200 <= status < 300:
        return None
    return {503: Outcome.REJECTED_503, 504: Outcome.TIMEOUT_504}.get(status,
                                                                     Outcome.OTHER_STATUS)


def percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no data."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


@dataclass
class TargetReport:
    url: str
    rate: float
    arrivals: int = 0
    sent: int = 0
    # Arrivals not sent because the target already had max_inflight requests
    # open: the cap that keeps an open-loop generator from running away.
    dropped: int = 0
    ok: int = 0
    rejected_503: int = 0
    timeout_504: int = 0
    transport_errors: int = 0
    protocol_errors: int = 0
    client_timeouts: int = 0
    abandoned: int = 0
    other_status: dict[int, int] = field(default_factory=dict)
    latency_p50_s: float | None = None
    latency_p99_s: float | None = None


@dataclass
class LoadReport:
    duration_s: float
    seed: int | None
    targets: dict[str, TargetReport]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)


@dataclass
class TargetTally:
    """Mutable per-target accounting while the load runs."""

    url: str
    rate: float
    arrivals: int = 0
    sent: int = 0
    dropped: int = 0
    inflight: int = 0
    outcomes: Counter[Outcome] = field(default_factory=Counter)
    other_status: Counter[int] = field(default_factory=Counter)
    ok_latencies: list[float] = field(default_factory=list)

    def record(self, outcome: Outcome, latency: float, status: int | None = None) -> None:
        self.outcomes[outcome] += 1
        if outcome is Outcome.OTHER_STATUS and status is not None:
            self.other_status[status] += 1
        if outcome is Outcome.OK:
            self.ok_latencies.append(latency)

    def report(self) -> TargetReport:
        latencies = sorted(self.ok_latencies)
        return TargetReport(
            url=self.url, rate=self.rate, arrivals=self.arrivals, sent=self.sent,
            dropped=self.dropped,
            ok=self.outcomes[Outcome.OK],
            rejected_503=self.outcomes[Outcome.REJECTED_503],
            timeout_504=self.outcomes[Outcome.TIMEOUT_504],
            transport_errors=self.outcomes[Outcome.TRANSPORT_ERROR],
            protocol_errors=self.outcomes[Outcome.PROTOCOL_ERROR],
            client_timeouts=self.outcomes[Outcome.CLIENT_TIMEOUT],
            abandoned=self.outcomes[Outcome.ABANDONED],
            other_status=dict(sorted(self.other_status.items())),
            latency_p50_s=percentile(latencies, 50), latency_p99_s=percentile(latencies, 99))
