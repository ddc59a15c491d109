"""NVML as a module object, for the Instance exporter's GPU collector to read.

The collector takes its NVML module as a parameter (`GpuReader(nvml)`); production
hands it `pynvml`. The tests hand it this, scripted, and the demo hands it this,
following the simulated engines' load (deploy/demo/gpu_exporter.py), so both
exercise the collector code that ships: the seam is the module, nothing below it.
"""

from __future__ import annotations

import types
from collections import namedtuple
from dataclasses import dataclass, field
from typing import Any

# pynvml's values (nvidia-ml-py's pynvml.py, NVML_ERROR_*).
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_TEMPERATURE_GPU = 0


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


@dataclass
class FakeGpu:
    uuid: str
    name: str | bytes
    util: int = 50
    used: int = 10 * 2**30
    total: int = 80 * 2**30
    power_mw: int | None = 300_000  # None: the board has no power sensor
    temp: int = 60


@dataclass
class FakeNvml:
    """A host's GPUs as NVML would report them; flip `failing` to break one mid-run.

    `init_error`: the NVML_ERROR_* value nvmlInit raises (None: it succeeds);
    `inits` counts its calls.
    """

    gpus: list[FakeGpu]
    init_error: int | None = None
    inits: int = 0
    failing: set[int] = field(default_factory=set)
    shutdowns: int = 0

    def _gpu(self, handle: int) -> FakeGpu:
        if handle in self.failing:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        return self.gpus[handle]

    def _power(self, handle: int) -> int:
        power = self._gpu(handle).power_mw
        if power is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return power

    def _init(self) -> None:
        self.inits += 1
        if self.init_error is not None:
            raise NVMLError(self.init_error)

    def _shutdown(self) -> None:
        self.shutdowns += 1

    def module(self) -> types.ModuleType:
        m = types.ModuleType("fake_pynvml")
        Util = namedtuple("Util", "gpu memory")
        Mem = namedtuple("Mem", "total free used")
        attrs: dict[str, Any] = {
            "NVMLError": NVMLError,
            "NVML_ERROR_NOT_SUPPORTED": NVML_ERROR_NOT_SUPPORTED,
            "NVML_ERROR_DRIVER_NOT_LOADED": NVML_ERROR_DRIVER_NOT_LOADED,
            "NVML_ERROR_LIBRARY_NOT_FOUND": NVML_ERROR_LIBRARY_NOT_FOUND,
            "NVML_TEMPERATURE_GPU": NVML_TEMPERATURE_GPU,
            "nvmlInit": self._init,
            "nvmlShutdown": self._shutdown,
            "nvmlDeviceGetCount": lambda: len(self.gpus),
            "nvmlDeviceGetHandleByIndex": lambda i: i,
            "nvmlDeviceGetUUID": lambda h: self._gpu(h).uuid,
            "nvmlDeviceGetName": lambda h: self._gpu(h).name,
            "nvmlDeviceGetUtilizationRates": lambda h: Util(self._gpu(h).util, 0),
            "nvmlDeviceGetMemoryInfo": lambda h: Mem(self._gpu(h).total,
                                                     self._gpu(h).total - self._gpu(h).used,
                                                     self._gpu(h).used),
            "nvmlDeviceGetPowerUsage": self._power,
            "nvmlDeviceGetTemperature": lambda h, sensor: self._gpu(h).temp,
        }
        for name, value in attrs.items():
            setattr(m, name, value)
        return m
