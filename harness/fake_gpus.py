"""Stand-ins for NVML and psutil, built as real module objects so the readers
receive exactly the kind of thing production hands them. The NVML one lives with
the demo, which simulates GPUs through the same seam (deploy/demo/sim_nvml.py)."""

from __future__ import annotations

import types
from collections import namedtuple
from dataclasses import dataclass

from deploy.demo.sim_nvml import (
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_TEMPERATURE_GPU,
    FakeGpu,
    FakeNvml,
    NVMLError,
)

__all__ = ["NVML_ERROR_DRIVER_NOT_LOADED", "NVML_ERROR_GPU_IS_LOST",
           "NVML_ERROR_LIBRARY_NOT_FOUND", "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
           "NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_NO_PERMISSION", "NVML_TEMPERATURE_GPU",
           "CpuTimes", "FakeGpu", "FakeNvml", "FakePsutil", "NVMLError", "NicIo", "NicStats",
           "VMem", "cpu", "three_gpus"]


def three_gpus() -> FakeNvml:
    return FakeNvml([
        FakeGpu("GPU-aaaa", "NVIDIA H100 80GB HBM3", util=10),
        FakeGpu("GPU-bbbb", b"NVIDIA H100 80GB HBM3", util=55),  # old pynvml returns bytes
        FakeGpu("GPU-cccc", "NVIDIA H100 80GB HBM3", util=99, power_mw=None),
    ])


CpuTimes = namedtuple("CpuTimes", "user nice system idle iowait irq softirq steal guest guest_nice")
VMem = namedtuple("VMem", "total available")
NicIo = namedtuple("NicIo", "bytes_sent bytes_recv")
NicStats = namedtuple("NicStats", "isup flags")


@dataclass
class FakePsutil:
    """psutil answers scripted per call, so CPU and network deltas are exact."""

    cpu: list[CpuTimes]
    nics: list[dict[str, NicIo]]
    total: int = 64 * 2**30
    available: int = 48 * 2**30
    error: OSError | None = None

    def module(self) -> types.ModuleType:
        m = types.ModuleType("fake_psutil")
        cpu, nics = iter(self.cpu), iter(self.nics)

        def cpu_times() -> CpuTimes:
            if self.error is not None:
                raise self.error
            return next(cpu)

        m.cpu_times = cpu_times  # type: ignore[attr-defined]
        m.cpu_count = lambda logical=True: 16  # type: ignore[attr-defined]
        m.virtual_memory = lambda: VMem(self.total, self.available)  # type: ignore[attr-defined]
        m.net_io_counters = lambda pernic=False: next(nics)  # type: ignore[attr-defined]
        m.net_if_stats = lambda: {  # type: ignore[attr-defined]
            "lo": NicStats(True, "up,loopback,running"),
            "eth0": NicStats(True, "up,broadcast,running,multicast"),
            "docker0": NicStats(True, "up,broadcast,multicast")}
        return m


def cpu(busy: float, idle: float) -> CpuTimes:
    """Cumulative CPU times with `busy` seconds of user time and `idle` idle seconds."""
    return CpuTimes(busy, 0.0, 0.0, idle, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
