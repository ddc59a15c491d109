"""The demo Proxy's two waiting lines: bounded, first come first served.

A request waits in the prepare line for a preparation worker, then in the
ready line for a free slot on an alive Instance. A line holds the waiting
requests themselves (not a copy), so whoever leaves — served, timed out, or
cancelled by a client that went away — leaves the line at once and the depth
the exporter reads at scrape time is the number really waiting.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

from poolscope.exporters.proxy import ProxyExporter, Ticket


class QueueFull(Exception):
    """The line is at its configured capacity; the request is turned away."""

    def __init__(self, queue: str) -> None:
        super().__init__(f"{queue} queue is full")
        self.queue = queue


class Wakeup:
    """Wakes every waiter at once; a waiter re-checks its own condition.

    A waiter takes the current event right after checking, with no await in
    between, so a notify can never fall between its check and its wait.
    """

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self) -> None:
        await self._event.wait()


class WaitingLine:
    """A bounded FIFO of waiting requests, watched by the Proxy exporter."""

    def __init__(self, exporter: ProxyExporter, name: str, capacity: int) -> None:
        self._members: dict[Ticket, None] = {}  # insertion order is arrival order
        self.metrics = exporter.add_queue(name, depth=lambda: len(self._members),
                                          capacity=capacity)
        self.capacity = capacity
        self.changed = Wakeup()

    @contextmanager
    def join(self, deadline: asyncio.Timeout) -> Iterator[Ticket]:
        """Wait in line for the body of the `with`; raises QueueFull when at capacity.

        Leaving with a cancellation after `deadline` expired is a timeout
        rejection; any other way out is just leaving (its wait is observed).
        """
        if len(self._members) >= self.capacity:
            self.metrics.reject("full")
            raise QueueFull(self.metrics.name)
        ticket = self.metrics.enter()
        self._members[ticket] = None
        try:
            yield ticket
        except asyncio.CancelledError:
            if deadline.expired():
                self.metrics.reject("timeout")
            raise
        finally:
            del self._members[ticket]
            self.metrics.leave(ticket)
            self.changed.notify()

    def first(self) -> Ticket | None:
        return next(iter(self._members), None)

    def __len__(self) -> int:
        return len(self._members)
