"""Background sampling: slow reads happen on a timer, scrapes read what is held.

NVML calls and an engine's /metrics can take tens of milliseconds or hang
outright. If a scrape waited on them, one stuck GPU driver would make the whole
exporter look down (`up == 0`) and take every healthy series with it. So each
reader runs in its own task at a fixed interval, bounded by a timeout; the
scrape only copies the latest held sample. A failed sample drops what was held
(measured or absent: the last good value is not re-served as if current) and
the health board says why. A held sample older than FRESH_S (the loop
itself stalled) is not served either: what an exporter serves is fresh, so the
recording rules need no freshness gate of their own. A reader with nothing to
read on this host raises Unavailable instead: a state, held without a sample
and without counting an error (poolscope.exporters.common.health).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from prometheus_client.core import Metric

from poolscope.contract.thresholds import FRESH_S
from poolscope.exporters.common.health import (
    CollectorHealth,
    ErrorReason,
    HealthBoard,
    UnavailableReason,
)
from poolscope.service.argtypes import positive_float
from poolscope.service.identity import Identity

log = logging.getLogger(__name__)


def sample_interval(value: str) -> float:
    """A background sampling interval: a sample older than FRESH_S is not served, so
    sampling less often would blank the series between two samples."""
    number = positive_float(value)
    if number > FRESH_S:
        raise argparse.ArgumentTypeError(f"at most {FRESH_S:g} s (a sample older than that "
                                         f"is not fresh), got {value!r}")
    return number

S = TypeVar("S")


class SampleError(Exception):
    """A read failed for a reason in the health vocabulary."""

    def __init__(self, reason: ErrorReason, detail: str) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail


class Unavailable(Exception):
    """The reader has nothing to read on this host (a CPU-only host's GPUs): a state
    in the health vocabulary, not a failure."""

    def __init__(self, reason: UnavailableReason, detail: str) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail


class Reader(Protocol[S]):
    """One collector: reads a sample off the event loop's critical path, and turns
    a held sample into families at scrape time.

    `read` raises SampleError for failures it understands, and Unavailable when
    there is nothing to read on this host. A sample may carry
    `read_errors` (a tuple of ErrorReason) for parts that failed while the
    sample as a whole succeeded, e.g. one GPU of eight.
    """

    name: str
    reasons: tuple[ErrorReason, ...]

    async def read(self) -> S: ...

    def families(self, sample: S, ids: Identity) -> Iterator[Metric]: ...


@dataclass
class Slot(Generic[S]):
    """A reader, its health and the latest sample it produced (None: absent)."""

    reader: Reader[S]
    health: CollectorHealth
    timeout: float
    value: S | None = None
    observers: list[Callable[[S], None]] = field(default_factory=list)
    # A read that outlived its timeout. It is waited on again rather than
    # started anew: a call stuck in a driver cannot be cancelled, and a fresh
    # thread every tick would pile up until it starved the other collectors.
    pending: asyncio.Future[S] | None = None
    pending_since: float = 0.0  # when `pending` was started, on the loop's clock

    def fresh(self) -> bool:
        """A sample is held and no older than FRESH_S."""
        age = self.health.age()
        return self.value is not None and age is not None and age <= FRESH_S

    def current(self) -> S | None:
        """The held sample while it is fresh: what the exporter serves and decides on."""
        return self.value if self.fresh() else None

    def families(self, ids: Identity) -> Iterator[Metric]:
        sample = self.current()
        if sample is not None:
            yield from self.reader.families(sample, ids)


class SamplingLoop:
    """Runs every slot's reader on its own timer until stopped."""

    def __init__(self, interval: float, board: HealthBoard,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        if interval <= 0:
            raise ValueError("sample interval must be positive")
        self.interval = interval
        self.board = board
        self._monotonic = monotonic
        self._slots: list[Slot[object]] = []
        self._tasks: list[asyncio.Task[None]] = []
        # Samples finished, failed ones included: what a cached rendering of the
        # held state is keyed on (poolscope.exporters.common.exposition).
        self.samples_taken = 0

    def add(self, reader: Reader[S], timeout: float | None = None) -> Slot[S]:
        """Register a reader; `timeout` bounds one read (default: the interval)."""
        slot: Slot[S] = Slot(reader, self.board.add(reader.name, reader.reasons),
                             timeout if timeout is not None else self.interval)
        self._slots.append(slot)  # type: ignore[arg-type]
        return slot

    def fresh(self) -> tuple[bool, ...]:
        """Which slots serve their sample: part of a cached page's key, so a sample
        that ages past its limit leaves the page at the next scrape."""
        return tuple(slot.fresh() for slot in self._slots)

    async def sample(self, slot: Slot[S]) -> None:
        """Take one sample into `slot` and record its health."""
        start = self._monotonic()
        if slot.pending is None:
            slot.pending = asyncio.ensure_future(slot.reader.read())
            slot.pending_since = start
        read = slot.pending
        try:
            # shield: a timeout abandons the wait, not the read (see Slot.pending).
            # asyncio.timeout, not wait_for: on 3.11 wait_for returns a read that ends
            # as the task is cancelled and drops the cancellation, so stop() waits for
            # ever on a loop that samples on.
            async with asyncio.timeout(slot.timeout):
                value = await asyncio.shield(read)
        except SampleError as e:
            self._fail(slot, e.reason, e.detail, start)
        except Unavailable as e:
            # Said once per reason: it is how the host is, not news every second.
            if slot.health.unavailable_reason is not e.reason:
                log.info("collector %s unavailable (%s): %s", slot.reader.name,
                         e.reason.value, e.detail)
            slot.value = None
            slot.health.unavailable(e.reason)
        except TimeoutError:
            # A reader with nothing to read that is looking again (a driver probe) stays
            # unavailable while the look is young; one that hangs past FRESH_S (a wedged
            # GPU hanging nvmlInit) is a failure, or the state would hide it for ever.
            if (slot.health.unavailable_reason is None
                    or start - slot.pending_since >= FRESH_S):
                self._fail(slot, ErrorReason.TIMEOUT, f"no answer within {slot.timeout:g}s",
                           start)
        except Exception as e:  # a reader bug must not stop the other collectors
            log.exception("collector %s: unexpected error", slot.reader.name)
            self._fail(slot, ErrorReason.INTERNAL, repr(e), start)
        else:
            if slot.health.success is False:
                log.warning("collector %s recovered", slot.reader.name)
            elif slot.health.unavailable_reason is not None:
                log.info("collector %s now available", slot.reader.name)
            slot.value = value
            slot.health.succeeded(self._monotonic() - start)
            for reason in getattr(value, "read_errors", ()):
                slot.health.count_error(reason)
            for observe in slot.observers:
                observe(value)
        finally:
            if read.done():
                slot.pending = None
            self.samples_taken += 1

    def _fail(self, slot: Slot[S], reason: ErrorReason, detail: str, start: float) -> None:
        # Log transitions, not every failed second: a dead engine would flood the log.
        if slot.health.success is not False or slot.health.last_reason is not reason:
            log.warning("collector %s failed (%s): %s", slot.reader.name, reason.value, detail)
        slot.value = None
        slot.health.failed(reason, self._monotonic() - start)

    async def sample_all(self) -> None:
        """One sample of every slot, concurrently (startup and tests)."""
        await asyncio.gather(*(self.sample(s) for s in self._slots))

    def start(self) -> None:
        if self._tasks:
            raise RuntimeError("sampling already started")
        self._tasks = [asyncio.create_task(self._run(s), name=f"sample-{s.reader.name}")
                       for s in self._slots]

    async def _run(self, slot: Slot[S]) -> None:
        # Fixed-rate schedule: a slow read shortens the next wait instead of
        # drifting, and missed ticks are skipped rather than burst.
        next_at = self._monotonic()
        while True:
            await self.sample(slot)
            next_at += self.interval
            now = self._monotonic()
            if next_at < now:
                next_at = now + self.interval - (now - next_at) % self.interval
            await asyncio.sleep(next_at - now)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        for slot in self._slots:
            if slot.pending is not None:
                slot.pending.cancel()  # a thread under it runs on, but nobody waits
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await slot.pending
                slot.pending = None
