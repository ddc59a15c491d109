"""GPUs through NVML (source="nvml").

The NVML module is a parameter so tests can hand in a fake; production uses
`pynvml` from nvidia-ml-py. Without NVML there are no GPU series at all and the
collector reports `nvml_unavailable`: a host without a driver is not a host
with idle GPUs. A GPU whose reads fail is reported unhealthy and its usage
series go absent, since an unhealthy GPU is neither used nor free capacity;
the other GPUs carry on. Beside the per-GPU series, each GPU model on the host
gets per-Instance aggregates (`poolscope_instance_gpu*`) computed from the same
held sample at scrape time: the pool rules read those, one series per model
rather than one per GPU.
"""

from __future__ import annotations

import asyncio
import ctypes
import importlib
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from prometheus_client.core import Metric

from poolscope.exporters.common import catalog
from poolscope.exporters.common.health import ErrorReason
from poolscope.exporters.common.sampling import SampleError
from poolscope.service.identity import Identity

SOURCE = catalog.SOURCE_NVML
NVML_LIBRARY = "libnvidia-ml.so.1"  # the name pynvml itself loads on Linux


@dataclass(frozen=True)
class GpuIdentity:
    index: int
    uuid: str
    model: str

    def labels(self) -> tuple[str, str, str]:
        return str(self.index), self.uuid, self.model


@dataclass(frozen=True)
class GpuReading:
    identity: GpuIdentity
    healthy: bool
    utilization: float | None = None
    memory_used: float | None = None
    memory_total: float | None = None
    power_watts: float | None = None
    temperature_celsius: float | None = None


@dataclass(frozen=True)
class GpuSample:
    devices: tuple[GpuReading, ...]
    read_errors: tuple[ErrorReason, ...] = ()


# The per-model aggregates of a reading, and how each combines the healthy GPUs' values.
_AGGREGATES: tuple[tuple[catalog.Family, Callable[[GpuReading], float | None],
                         Callable[[Sequence[float]], float]], ...] = (
    (catalog.INSTANCE_GPU_UTILIZATION_SUM, lambda d: d.utilization, math.fsum),
    (catalog.INSTANCE_GPU_UTILIZATION_MAX, lambda d: d.utilization, max),
    (catalog.INSTANCE_GPU_MEMORY_USED_SUM, lambda d: d.memory_used, math.fsum),
    (catalog.INSTANCE_GPU_MEMORY_TOTAL_SUM, lambda d: d.memory_total, math.fsum),
)
HEALTHY, UNHEALTHY = catalog.GPU_HEALTH


def _per_model(devices: Sequence[GpuReading], ids: Identity) -> Iterator[Metric]:
    """The host's GPUs summed up per model, from the same sample as the per-GPU series.

    The pool rules read these instead of every GPU (one series per Instance and
    model, whatever the GPU count). Counts are published for both healthy and
    unhealthy, so a 0 is measured; a model whose GPUs all fail has no sums or
    max at all rather than a 0 that would pass for idle, empty memory.
    """
    by_model: dict[str, list[GpuReading]] = {}
    for d in devices:
        by_model.setdefault(d.identity.model, []).append(d)
    counts = catalog.INSTANCE_GPUS.new()
    for model, gpus in by_model.items():
        healthy = sum(1 for d in gpus if d.healthy)
        ids.add(counts, SOURCE, healthy, model, HEALTHY)
        ids.add(counts, SOURCE, len(gpus) - healthy, model, UNHEALTHY)
    yield counts
    for family, get, combine in _AGGREGATES:
        metric = family.new()
        for model, gpus in by_model.items():
            values = [v for d in gpus if d.healthy and (v := get(d)) is not None]
            if values:
                ids.add(metric, SOURCE, combine(values), model)
        yield metric


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


class GpuReader:
    name = "gpu"
    reasons = (ErrorReason.NVML_UNAVAILABLE, ErrorReason.NVML_READ)

    def __init__(self, nvml: ModuleType | None = None) -> None:
        self._nvml = nvml
        self._initialised = False
        # Identity of each index as last read, so a GPU that stops answering
        # keeps its uuid/model labels on its `healthy 0` series.
        self._identities: dict[int, GpuIdentity] = {}

    async def read(self) -> GpuSample:
        return await asyncio.to_thread(self._read)

    def _module(self) -> ModuleType:
        if self._nvml is None:
            # pynvml is a megabyte of Python that can only fail without the
            # driver's library, so a GPU-less host checks for the library first
            # and never pays for the import.
            try:
                ctypes.CDLL(NVML_LIBRARY)
            except OSError as e:
                raise SampleError(ErrorReason.NVML_UNAVAILABLE, str(e)) from e
            try:
                self._nvml = importlib.import_module("pynvml")
            except ImportError as e:
                raise SampleError(ErrorReason.NVML_UNAVAILABLE, f"pynvml: {e}") from e
        return self._nvml

    def _read(self) -> GpuSample:
        nvml = self._module()
        if not self._initialised:
            try:
                nvml.nvmlInit()
            except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
                raise SampleError(ErrorReason.NVML_UNAVAILABLE, str(e)) from e
            self._initialised = True
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as e:
            raise SampleError(ErrorReason.NVML_READ, f"device count: {e}") from e
        devices = tuple(self._device(nvml, i) for i in range(count))
        errors = tuple(ErrorReason.NVML_READ for d in devices if not d.healthy)
        return GpuSample(devices, errors)

    def _device(self, nvml: ModuleType, index: int) -> GpuReading:
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            identity = GpuIdentity(index, _text(nvml.nvmlDeviceGetUUID(handle)),
                                   _text(nvml.nvmlDeviceGetName(handle)))
            self._identities[index] = identity
            util = nvml.nvmlDeviceGetUtilizationRates(handle)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            power = self._optional(nvml, lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0)
            temperature = self._optional(
                nvml, lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))
        except nvml.NVMLError:
            known = self._identities.get(index, GpuIdentity(index, "", ""))
            return GpuReading(known, healthy=False)
        return GpuReading(identity, healthy=True, utilization=util.gpu / 100.0,
                          memory_used=float(memory.used), memory_total=float(memory.total),
                          power_watts=power, temperature_celsius=temperature)

    @staticmethod
    def _optional(nvml: ModuleType, read: Callable[[], Any]) -> float | None:
        """A sensor the board lacks is absent; any other error fails the GPU."""
        try:
            return float(read())
        except nvml.NVMLError as e:
            if getattr(e, "value", None) == nvml.NVML_ERROR_NOT_SUPPORTED:
                return None
            raise

    def families(self, sample: GpuSample, ids: Identity) -> Iterator[Metric]:
        devices = catalog.GPU_DEVICES.new()
        ids.add(devices, SOURCE, len(sample.devices))
        yield devices
        healthy = catalog.GPU_HEALTHY.new()
        for d in sample.devices:
            ids.add(healthy, SOURCE, 1.0 if d.healthy else 0.0, *d.identity.labels())
        yield healthy
        usage: tuple[tuple[catalog.Family, Callable[[GpuReading], float | None]], ...] = (
            (catalog.GPU_UTILIZATION, lambda d: d.utilization),
            (catalog.GPU_MEMORY_USED, lambda d: d.memory_used),
            (catalog.GPU_MEMORY_TOTAL, lambda d: d.memory_total),
            (catalog.GPU_POWER, lambda d: d.power_watts),
            (catalog.GPU_TEMPERATURE, lambda d: d.temperature_celsius),
        )
        for family, get in usage:
            metric = family.new()
            for d in sample.devices:
                value = get(d)
                if d.healthy and value is not None:
                    ids.add(metric, SOURCE, value, *d.identity.labels())
            yield metric
        yield from _per_model(sample.devices, ids)

    def close(self) -> None:
        if self._initialised and self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            finally:
                self._initialised = False
