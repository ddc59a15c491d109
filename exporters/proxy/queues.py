"""Accounting for the Proxy's prepare and ready queues.

The queue itself belongs to the embedding proxy; this module only watches it.
Depth is read live at scrape time through a callable over the real queue, so
the published number is the queue's own length, not a counter kept beside it
that a missed decrement could skew. Each request that joins gets a ticket;
handing it back observes the wait (however the request left) and the tickets
still out give the age of the oldest waiting request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from poolscope.contract.catalog import QUEUES
from poolscope.exporters.proxy.clock import SYSTEM_CLOCK, Clock
from poolscope.exporters.proxy.histogram import QUEUE_WAIT_BUCKETS, Histogram

RejectionReason = Literal["full", "timeout"]
REJECTION_REASONS: tuple[RejectionReason, ...] = ("full", "timeout")


class Ticket:
    """Proof of a request's place in a queue, handed back when it leaves."""

    __slots__ = ("entered",)

    def __init__(self, entered: float) -> None:
        self.entered = entered


class QueueMetrics:
    """One queue's depth, bound, waits and rejections."""

    def __init__(self, name: str, depth: Callable[[], int], capacity: int | None = None,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        if name not in QUEUES:
            raise ValueError(f"queue {name!r} is not in the catalog's QUEUES {QUEUES}")
        if capacity is not None and capacity < 1:
            raise ValueError(f"capacity must be a positive integer or None, not {capacity!r}")
        self.name = name
        self.capacity = capacity
        self._depth = depth
        self._clock = clock
        self._waiting: dict[Ticket, None] = {}  # insertion order is arrival order
        self.wait = Histogram(QUEUE_WAIT_BUCKETS)
        self.rejections: dict[RejectionReason, int] = dict.fromkeys(REJECTION_REASONS, 0)

    def enter(self) -> Ticket:
        """A request joined the queue."""
        ticket = Ticket(self._clock.monotonic())
        self._waiting[ticket] = None
        return ticket

    def leave(self, ticket: Ticket) -> float:
        """The request left the queue (dispatched, timed out, cancelled); returns its wait."""
        if ticket not in self._waiting:
            raise ValueError(f"ticket already left the {self.name} queue")
        del self._waiting[ticket]
        waited = max(0.0, self._clock.monotonic() - ticket.entered)
        self.wait.observe(waited)
        return waited

    def reject(self, reason: RejectionReason) -> None:
        """The queue turned a request away: it was full, or the request waited too long."""
        if reason not in REJECTION_REASONS:
            raise ValueError(f"unknown rejection reason {reason!r}; one of {REJECTION_REASONS}")
        self.rejections[reason] += 1

    def depth(self) -> int:
        """The embedding queue's length now; raises when it is not a count."""
        value = self._depth()
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{self.name} queue depth callable returned {value!r}")
        return value

    def oldest_age(self) -> float | None:
        """Seconds the longest-waiting request has waited; None when nobody waits."""
        oldest = next(iter(self._waiting), None)  # insertion order: the first arrived first
        return None if oldest is None else max(0.0, self._clock.monotonic() - oldest.entered)
