"""What a diagnosis says: the cause's code, its detail and the Instances it hit.

Every check in the diagnosis_* modules answers in these terms, so the route that
serves them (`/debug/pool_resource_sources`) renders one shape whichever check
found the cause; the codes are stable strings a reader may match on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from poolscope.bridge.local_view import LocalView
from poolscope.contract.fields import Field


class Code(StrEnum):
    PROXY_EXPORTER_DOWN = "proxy_exporter_down"
    PROXY_COLLECTOR_FAILED = "proxy_collector_failed"
    NO_INSTANCES = "no_registered_instances"
    NO_ALIVE_INSTANCES = "no_alive_instances"
    INSTANCE_EXPORTER_DOWN = "instance_exporter_down"
    HOST_COLLECTOR_FAILED = "host_collector_failed"
    RESOURCE_STALE = "resource_stale"
    NVML_UNAVAILABLE = "nvml_unavailable"
    GPU_COLLECTOR_FAILED = "gpu_collector_failed"
    NO_GPU = "no_gpu"
    GPUS_UNHEALTHY = "gpus_unhealthy"
    ENGINE_NOT_CONFIGURED = "engine_not_configured"
    ENGINE_UNREACHABLE = "engine_unreachable"
    ENGINE_NOT_EXPOSING = "engine_not_exposing"
    ENGINE_ASLEEP = "engine_asleep"
    NOT_WIRED = "not_wired"
    NO_TRAFFIC = "no_traffic"
    RATE_NOT_COVERED = "rate_window_not_covered"
    ROLLUP_ABSENT = "rollup_absent"


@dataclass(frozen=True)
class Reason:
    code: Code
    detail: str
    instances: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"code": str(self.code), "detail": self.detail,
                "instances": list(self.instances)}


# One input's check: the reasons it finds for the field's null in the view.
Check = Callable[[LocalView, Field], list[Reason]]
# One Instance's cause, or None when that Instance explains nothing.
Cause = Callable[[LocalView, str], tuple[Code, str] | None]
