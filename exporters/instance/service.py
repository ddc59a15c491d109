"""The Instance exporter's state: its readers, their held samples, and the
prometheus_client collector that turns them into families at scrape time.

The collector reads held state only (no I/O, no device calls), so a scrape
costs the same whether the engine answers in 1 ms or never.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType

from prometheus_client.core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from poolscope.contract import catalog
from poolscope.exporters.common.health import HealthBoard
from poolscope.exporters.common.sampling import SamplingLoop, Slot
from poolscope.exporters.instance.admission import Admission, AdmissionInputs, AdmissionThresholds
from poolscope.exporters.instance.capacity import Capacity
from poolscope.exporters.instance.engine import AUTO, EngineReader, EngineSample
from poolscope.exporters.instance.gpu import GpuReader, GpuSample
from poolscope.exporters.instance.host import HostReader, HostSample
from poolscope.exporters.instance.success_rate import SuccessRate
from poolscope.service.identity import Identity

# An engine read gets this long beyond its HTTP timeout before the loop gives
# up on it, so the HTTP client's own, more specific timeout fires first.
_LOOP_GRACE_S = 0.5


@dataclass(frozen=True)
class Settings:
    """What one Instance exporter runs with.

    The collector switches (`--collector.NAME` / `--no-collector.NAME`) are None for
    auto-detection, as node_exporter's: host always on, gpu on when NVML is there
    (unavailable, not failing, when it is not), engine on when
    `engine_metrics_url` is set. True forces one on (a GPU-less host then fails
    the gpu collector: GPUs were asked for); False leaves it out with every series
    it would publish, health included.
    """

    instance_id: str
    proxy_id: str
    sample_interval: float = 1.0
    engine_metrics_url: str | None = None
    engine: str = AUTO
    engine_timeout: float = 2.0
    capacity: int | None = None
    thresholds: AdmissionThresholds = field(default_factory=AdmissionThresholds)
    draining: bool = False
    host_collector: bool | None = None
    gpu_collector: bool | None = None
    engine_collector: bool | None = None

    def __post_init__(self) -> None:
        if self.engine_collector and not self.engine_metrics_url:
            raise ValueError("the engine collector needs an engine_metrics_url to read")

    @property
    def engine_enabled(self) -> bool:
        return bool(self.engine_metrics_url) and self.engine_collector is not False


class InstanceExporter(Collector):
    """Everything one Instance exporter measures; register it in a CollectorRegistry."""

    def __init__(self, settings: Settings, nvml: ModuleType | None = None,
                 host: HostReader | None = None,
                 wall: Callable[[], float] = time.time,
                 gpu: GpuReader | None = None) -> None:
        """`nvml`, `host`, `wall` (the clock behind the last-success timestamps) and
        `gpu` (a reader in place of the one `nvml` and the switch would make) are
        seams for tests: fake GPUs, scripted psutil, a skewed host clock."""
        self.settings = settings
        self.ids = Identity(settings.proxy_id, settings.instance_id)
        self.board = HealthBoard(wall=wall)
        self.loop = SamplingLoop(settings.sample_interval, self.board)
        self.capacity = Capacity(settings.capacity)
        self.success_rate = SuccessRate()
        self.admission = Admission(settings.thresholds, settings.draining)
        # A collector switched off has no slot: no sample, no series, no health.
        self.host: Slot[HostSample] | None = None
        if settings.host_collector is not False:
            self.host = self.loop.add(host or HostReader())
        self._gpu_reader: GpuReader | None = None
        self.gpu: Slot[GpuSample] | None = None
        if settings.gpu_collector is not False:
            self._gpu_reader = gpu or GpuReader(nvml, required=settings.gpu_collector is True)
            self.gpu = self.loop.add(self._gpu_reader)
        self.engine: Slot[EngineSample] | None = None
        self._engine_reader: EngineReader | None = None
        if settings.engine_enabled and settings.engine_metrics_url:
            self._engine_reader = EngineReader(settings.engine_metrics_url, settings.engine,
                                               settings.engine_timeout,
                                               engine_capacity=settings.capacity is None,
                                               board=self.board)
            self.engine = self.loop.add(self._engine_reader,
                                        timeout=settings.engine_timeout + _LOOP_GRACE_S)
            self.engine.observers.append(self.capacity.observe)
            self.engine.observers.append(self.success_rate.observe)

    def registry(self) -> CollectorRegistry:
        """A fresh registry holding only this exporter's measurements; the served page
        adds the process' own series (exporters/instance/server.py)."""
        registry = CollectorRegistry()
        registry.register(self)
        return registry

    def admission_inputs(self) -> AdmissionInputs:
        engine = self.engine.current() if self.engine else None
        host = self.host.current() if self.host else None
        return AdmissionInputs(
            kv_cache_usage=engine.kv_cache_usage_max if engine else None,
            waiting=engine.waiting if engine else None,
            memory_free_ratio=host.memory_free_ratio if host else None,
            asleep=engine.asleep if engine else None)

    def describe(self) -> list[Metric]:
        return []  # families vary with what is measured; skip describe-time collect()

    def collect(self) -> Iterator[Metric]:
        yield from self.sampled_families()
        yield from self.scrape_time_families()

    def sampled_families(self) -> Iterator[Metric]:
        """Every family that stays the same until `round_key()` changes."""
        ids = self.ids
        if self.host is not None:
            yield from self.host.families(ids)
        if self.gpu is not None:
            yield from self.gpu.families(ids)
        if self.engine is not None:
            yield from self.engine.families(ids)
            if self.engine.fresh():
                yield from self.success_rate.families(ids)
        # A capacity is what a working engine can take: none while the engine this
        # exporter reads does not answer (with no engine to read, the operator's word).
        if self.engine is None or self.engine.fresh():
            yield from self.capacity.families(ids)
        yield from self.admission.families(self.admission_inputs(), ids)
        yield from self.board.sampled_families(ids.labels(catalog.SOURCE_EXPORTER))

    def scrape_time_families(self) -> Iterator[Metric]:
        """The families measured at scrape time: every sample's age."""
        yield from self.board.age_families(self.ids.labels(catalog.SOURCE_EXPORTER))

    def round_key(self) -> tuple[int, bool, tuple[bool, ...]]:
        """Changes whenever `sampled_families()` could: a sample taken (or failed),
        one aged past its limit, draining switched. The rest is fixed at startup."""
        return self.loop.samples_taken, self.admission.draining, self.loop.fresh()

    async def start(self) -> None:
        """First sample of everything, then sampling in the background."""
        await self.loop.sample_all()
        self.loop.start()

    async def stop(self) -> None:
        await self.loop.stop()
        if self._engine_reader is not None:
            await self._engine_reader.close()
        if self._gpu_reader is not None:
            await asyncio.to_thread(self._gpu_reader.close)
