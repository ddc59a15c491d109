"""How many requests this Instance can run at once.

Configured (`--capacity N`, source="configured") wins. Next comes the limit
the engine states itself (llama.cpp's slots, TensorRT-LLM's max batch size;
source="engine:<name>"), from its latest sample. Without either, the best
measured evidence is the most requests the engine has been seen running at
once in the last hour (source="learned"). That is a lower bound, and a windowed
one so that no single sample can hold it up for good: an outlier is forgotten
within the hour, and the mark follows a deployment that shrinks. It is absent
while the hour holds no running request: a mark of 0 would claim the replica
can run nothing, and make every load ratio infinite.

The rule in full:
- The hour is kept as one maximum per minute of the monotonic clock (at most 61
  numbers), so a peak counts for 60 to 61 minutes.
- A running count outside its plausible range (exporters/common/plausible.py:
  RUNNING, a whole number from 0 to 100,000) never enters it. The engine reader
  already fails such a sample (reason invalid_value, counted in
  poolscope_collector_errors_total), so it is reported, never used; the same test
  here keeps any other feed from moving the mark.
- An engine restart, seen as one of its counters going backwards, empties the
  window: the new process may run with other limits. A false alarm only loses
  evidence, so the capacity errs low (the pool looks busier), never high.

While the engine's latest sample says it is asleep (vLLM's sleep mode) there is
no capacity at all, configured or not: an asleep engine runs nothing until woken,
so its capacity is not free (docs/design.md, the contract). The learned window is
kept: waking the same process brings back the same limits.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator

from prometheus_client.core import Metric

from poolscope.contract import catalog
from poolscope.exporters.common.plausible import RUNNING
from poolscope.exporters.instance.engine import EngineSample
from poolscope.service.identity import Identity

# How long a peak of running requests stands as evidence of capacity: long enough
# to span a quiet spell between busy ones, short enough to forget an outlier.
LEARN_WINDOW_S = 3600.0
# The window's resolution, which bounds its memory to window / step + 1 numbers.
LEARN_STEP_S = 60.0
_WINDOW_STEPS = round(LEARN_WINDOW_S / LEARN_STEP_S)


class Capacity:
    def __init__(self, configured: int | None = None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        """`monotonic` is a seam, so tests can let an hour pass without sleeping."""
        if configured is not None and configured <= 0:
            raise ValueError("capacity must be a positive integer")
        self.configured = configured
        self.stated: tuple[float, str] | None = None
        self.asleep = False
        self._monotonic = monotonic
        # (step number, most requests running in that step), oldest first; only
        # steps that saw a running request.
        self._peaks: deque[tuple[int, float]] = deque()
        self._counters: tuple[float | None, ...] = (None, None, None)

    def observe(self, sample: EngineSample) -> None:
        """Fed every successful engine sample, so no peak between scrapes is missed."""
        # A stated 0 is no capacity: TensorRT-LLM publishes its series at 0 until
        # its first statistics arrive.
        self.stated = (sample.capacity, sample.source) if sample.capacity else None
        self.asleep = sample.asleep is True
        if self._restarted(sample):
            self._peaks.clear()
        step = self._step()
        while self._peaks and self._peaks[0][0] < step - _WINDOW_STEPS:
            self._peaks.popleft()
        running = sample.running
        if running is None or running <= 0 or not RUNNING.holds(running):
            return
        if self._peaks and self._peaks[-1][0] == step:
            if running > self._peaks[-1][1]:
                self._peaks[-1] = (step, running)
        else:
            self._peaks.append((step, running))

    def learned(self) -> float | None:
        """The evidence of the last hour only: older peaks may be outliers, or limits
        the deployment has since shrunk below."""
        oldest = self._step() - _WINDOW_STEPS
        peaks = [running for step, running in self._peaks if step >= oldest]
        return max(peaks) if peaks else None

    def current(self) -> tuple[float, str] | None:
        """(capacity, source), or None while unknown or while the engine is asleep."""
        if self.asleep:
            return None
        if self.configured is not None:
            return float(self.configured), catalog.SOURCE_CONFIGURED
        if self.stated is not None:
            return self.stated
        learned = self.learned()
        if learned is not None:
            return learned, catalog.SOURCE_LEARNED
        return None

    def families(self, ids: Identity) -> Iterator[Metric]:
        current = self.current()
        if current is not None:
            metric = catalog.INSTANCE_CAPACITY.new()
            ids.add(metric, current[1], current[0])
            yield metric

    def _step(self) -> int:
        return int(self._monotonic() // LEARN_STEP_S)

    def _restarted(self, sample: EngineSample) -> bool:
        """A counter lower than in the last sample: only a new engine process counts down."""
        counters = (sample.request_success, sample.prompt_tokens, sample.generation_tokens)
        previous = self._counters
        # A counter missing from one page keeps its last value: 500, absent, 4 restarted.
        self._counters = tuple(old if new is None else new
                               for old, new in zip(previous, counters, strict=True))
        return any(old is not None and new is not None and new < old
                   for old, new in zip(previous, counters, strict=True))
