"""GPUs through NVML (source="nvml").

The NVML module is a parameter so tests can hand in a fake; production uses
`pynvml` from nvidia-ml-py. A host without NVIDIA's driver has no GPU series at
all (not a host with idle GPUs) and, as node_exporter does for a collector with
nothing to read, is not failing either: the collector is *unavailable*
(poolscope_collector_unavailable_info, no success or error series), since a
CPU-only host must page nobody. Unavailable means the driver is not there:
libnvidia-ml.so.1 cannot be loaded (`no_nvml_library`), or it can and nvmlInit
answers that no kernel driver is loaded or its library is missing
(`driver_not_loaded`, `no_nvml_library`). Anything else is a failure
(`nvml_unavailable`, counted): pynvml failing to import next to a driver (a
broken install: it is a hard dependency), nvmlInit refusing for another reason
(permissions, a driver/library version mismatch), since the host has a driver
and, most likely, GPUs nobody measures. A working driver with no GPU is a
measured `poolscope_gpu_devices 0`. Once NVML is initialised, every error is a
failure. When the operator asks for GPUs (`required`, --collector.gpu), a
missing driver is a failure too.

While unavailable, detection is retried every REDETECT_S, not at every sample:
a driver can be installed after the exporter started (a GPU operator installs
it on a node whose pods are already running), and a minute is soon enough for
that, while each nvmlInit on a host whose driver is installed but not loaded
may have NVIDIA's library try to load the kernel module again. A probe costs a
failed dlopen (or a failed nvmlInit); between two the collector answers from its
held state, without a thread.

A GPU whose reads fail is reported unhealthy and its usage
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
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from prometheus_client.core import Metric

from poolscope.contract import catalog
from poolscope.exporters.common.health import ErrorReason, UnavailableReason
from poolscope.exporters.common.sampling import SampleError, Unavailable
from poolscope.service.identity import Identity

SOURCE = catalog.SOURCE_NVML
NVML_LIBRARY = "libnvidia-ml.so.1"  # the name pynvml itself loads on Linux
REDETECT_S = 60.0  # while no driver is found, how often to look again
# nvmlInit's answers that mean "no driver here" (pynvml's NVML_ERROR_* values,
# by name: a fake module carries the same names).
_NO_DRIVER: tuple[tuple[str, UnavailableReason], ...] = (
    ("NVML_ERROR_LIBRARY_NOT_FOUND", UnavailableReason.NO_NVML_LIBRARY),
    ("NVML_ERROR_DRIVER_NOT_LOADED", UnavailableReason.DRIVER_NOT_LOADED),
)


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

    def __init__(self, nvml: ModuleType | None = None, required: bool = False,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        """`required`: the operator asked for GPUs, so no driver is a failure."""
        self._nvml = nvml
        self._required = required
        self._monotonic = monotonic
        self._initialised = False
        # While no driver is found: that finding, and when to look again.
        self._absent: tuple[UnavailableReason, str] | None = None
        self._redetect_at = 0.0
        # Identity of each index as last read, so a GPU that stops answering
        # keeps its uuid/model labels on its `healthy 0` series.
        self._identities: dict[int, GpuIdentity] = {}

    async def read(self) -> GpuSample:
        if self._absent is not None:
            if self._monotonic() < self._redetect_at:
                raise Unavailable(*self._absent)  # new: a re-raise would grow its traceback
            self._absent = None  # look again; _no_driver holds it anew if still absent
        return await asyncio.to_thread(self._read)

    def _no_driver(self, reason: UnavailableReason, detail: str) -> Exception:
        """What finding no driver raises: a failure when GPUs were asked for, else
        the unavailable state, held until the next detection."""
        if self._required:
            return SampleError(ErrorReason.NVML_UNAVAILABLE,
                               f"{detail} (--collector.gpu asks for GPUs)")
        self._absent = reason, f"{detail}; no GPU series, looked for again every {REDETECT_S:g} s"
        self._redetect_at = self._monotonic() + REDETECT_S
        return Unavailable(*self._absent)

    def _module(self) -> ModuleType:
        if self._nvml is None:
            # pynvml is a megabyte of Python that can only fail without the
            # driver's library, so a GPU-less host checks for the library first
            # and never pays for the import.
            try:
                ctypes.CDLL(NVML_LIBRARY)
            except OSError as e:
                raise self._no_driver(UnavailableReason.NO_NVML_LIBRARY, str(e)) from e
            try:
                self._nvml = importlib.import_module("pynvml")
            except ImportError as e:
                raise SampleError(ErrorReason.NVML_UNAVAILABLE, f"pynvml: {e}") from e
        return self._nvml

    def _init(self, nvml: ModuleType) -> None:
        try:
            nvml.nvmlInit()
        except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded, NoPermission...
            code = getattr(e, "value", None)
            for name, reason in _NO_DRIVER:
                if code is not None and code == getattr(nvml, name, None):
                    raise self._no_driver(reason, f"nvmlInit: {e}") from e
            raise SampleError(ErrorReason.NVML_UNAVAILABLE, f"nvmlInit: {e}") from e
        self._initialised = True

    def _read(self) -> GpuSample:
        nvml = self._module()
        if not self._initialised:
            self._init(nvml)
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
