"""The capacity an engine states in a document beside its /metrics (llama.cpp's
`/props`, its `total_slots`), read as a collector of its own: `engine_capacity`.

That document is auxiliary: the load is on the page, and it is measured without
it. So a `/props` that cannot be read (a reverse proxy or an ingress that
passes only /metrics) must not blank the load. The engine collector succeeds;
this one fails with its own health, as node_exporter reports a collector that
fails alone: its success gauge 0, its error counter by reason, its last
success, and one log line per change that names the URL. The capacity then
falls back to the learned one (exporters/instance/capacity.py), never to a
stale slot count; with --capacity the document is not read at all.

Its health is registered only for an engine known to state its slots this way,
so a vLLM exporter publishes no series for a collector it never runs.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable

from poolscope.exporters.common.fetch import FETCH_REASONS, fetch_before
from poolscope.exporters.common.health import CollectorHealth, ErrorReason, HealthBoard
from poolscope.exporters.common.plausible import SLOTS
from poolscope.exporters.common.sampling import SampleError

log = logging.getLogger(__name__)

COLLECTOR = "engine_capacity"
REASONS = (*FETCH_REASONS, ErrorReason.INVALID_VALUE)


class SlotsReader:
    """Reads `total_slots` for the engine reader, keeping its own health on `board`
    (None: no health kept, as for a reader used alone)."""

    def __init__(self, board: HealthBoard | None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._board = board
        self._monotonic = monotonic
        self.health: CollectorHealth | None = None

    def expect(self) -> None:
        """Register the collector's health, once: from then on its error counters
        start at a measured 0, so the first failure is an increase."""
        if self.health is None and self._board is not None:
            self.health = self._board.add(COLLECTOR, REASONS)

    async def read(self, fetch: Callable[[str], Awaitable[str]], url: str,
                   deadline: float) -> float | None:
        """The slot count at `url`, or None when it cannot be read (recorded, logged)
        before `deadline` (the event loop's clock, shared with the page's read)."""
        self.expect()
        start = self._monotonic()
        try:
            slots = total_slots(url, await fetch_before(deadline, fetch, url))
        except SampleError as e:
            self._failed(e, self._monotonic() - start)
            return None
        if self.health is not None:
            if self.health.success is False:
                log.warning("collector %s recovered: %s", COLLECTOR, url)
            self.health.succeeded(self._monotonic() - start)
        return slots

    def _failed(self, error: SampleError, duration: float) -> None:
        health = self.health
        # Transitions only: a /props that never answers would flood the log every second.
        if health is None or health.success is not False or health.last_reason is not error.reason:
            log.warning("collector %s failed (%s): %s; the engine's load is still read, "
                        "its capacity is the learned one", COLLECTOR,
                        error.reason.value, error.detail)
        if health is not None:
            health.failed(error.reason, duration)


def total_slots(url: str, text: str) -> float:
    """`total_slots` of the JSON object `text`, in its plausible range (SLOTS); raises
    SampleError naming `url`."""
    try:
        slots = json.loads(text).get("total_slots")
    except (ValueError, AttributeError) as e:
        raise SampleError(ErrorReason.PARSE, f"{url}: not a JSON object: {e}") from e
    if isinstance(slots, bool) or not isinstance(slots, int):
        raise SampleError(ErrorReason.INVALID_VALUE, f"{url}: total_slots = {slots!r}")
    SLOTS.check(f"{url}: total_slots", slots)
    return float(slots)
