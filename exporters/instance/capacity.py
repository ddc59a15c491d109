"""How many requests this Instance can run at once.

Configured (`--capacity N`, source="configured") wins. Next comes the limit
the engine states itself (llama.cpp's slots, TensorRT-LLM's max batch size;
source="engine:<name>"), from its latest sample. Without either, the best
measured evidence is the most requests the engine has been seen running at
once (source="learned"). That is a lower bound, and it is absent until the
engine has been seen running at least one request: a high-water mark of 0
would claim the replica can run nothing, and make every load ratio infinite.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from exporters.common import catalog
from exporters.common.identity import Identity
from exporters.instance.engine import EngineSample


class Capacity:
    def __init__(self, configured: int | None = None) -> None:
        if configured is not None and configured <= 0:
            raise ValueError("capacity must be a positive integer")
        self.configured = configured
        self.stated: tuple[float, str] | None = None
        self.high_water: float | None = None

    def observe(self, sample: EngineSample) -> None:
        """Fed every successful engine sample, so no peak between scrapes is missed."""
        # A stated 0 is no capacity: TensorRT-LLM publishes its series at 0 until
        # its first statistics arrive.
        self.stated = (sample.capacity, sample.source) if sample.capacity else None
        running = sample.running
        if running is not None and running > 0 and (
                self.high_water is None or running > self.high_water):
            self.high_water = running

    def current(self) -> tuple[float, str] | None:
        """(capacity, source), or None while unknown."""
        if self.configured is not None:
            return float(self.configured), catalog.SOURCE_CONFIGURED
        if self.stated is not None:
            return self.stated
        if self.high_water is not None:
            return self.high_water, catalog.SOURCE_LEARNED
        return None

    def families(self, ids: Identity) -> Iterator[Metric]:
        current = self.current()
        if current is not None:
            metric = catalog.INSTANCE_CAPACITY.new()
            ids.add(metric, current[1], current[0])
            yield metric
