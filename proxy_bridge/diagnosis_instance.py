"""The Instance exporter's causes: its host collector (CPU, memory, network, sample
age) and its GPU collector, per member.

A member's host cause comes first for every field read from its host, and before its
GPU cause: an exporter that is down or a host sample that is stale explains a GPU
field too. No GPU or no NVIDIA driver is reported as a state, not a failure; NVML
failing where GPUs were asked for is a failure.
"""

from __future__ import annotations

from poolscope.bridge.local_queries import FRESHNESS_RULE
from poolscope.bridge.local_view import LocalView
from poolscope.bridge.pool_series import one
from poolscope.contract import catalog as c
from poolscope.contract.fields import Field
from poolscope.contract.thresholds import FRESH_S, MEMBER_MEMORY
from poolscope.proxy_bridge.diagnosis_members import declared, per_instance, registered
from poolscope.proxy_bridge.diagnosis_reason import Code, Reason

NVML_UNAVAILABLE = "nvml_unavailable"  # poolscope.exporters.common.health.ErrorReason


def exporter_down(view: LocalView, instance_id: str) -> tuple[Code, str] | None:
    if c.COLLECTOR_SUCCESS.name in view.series.of(instance_id):
        return None
    return (Code.INSTANCE_EXPORTER_DOWN,
            f"no {c.COLLECTOR_SUCCESS.name} series: the Instance exporter is down or not "
            "scraped")


def _failed(view: LocalView, instance_id: str, collector: str) -> list[str] | None:
    """The failing collector's reasons, or None when it last succeeded or is absent."""
    state = view.collector(instance_id, collector)
    return state["reasons"] if state["success"] is False else None


def _host_cause(view: LocalView, instance_id: str) -> tuple[Code, str] | None:
    down = exporter_down(view, instance_id)
    if down is not None:
        return down
    reasons = _failed(view, instance_id, "host")
    if reasons is not None:
        return (Code.HOST_COLLECTOR_FAILED,
                f"the host collector fails ({', '.join(reasons) or 'no reason counted'})")
    age = one(view.series.of(instance_id).get(FRESHNESS_RULE, []))
    if age is None or age > FRESH_S:
        return (Code.RESOURCE_STALE,
                f"no host sample younger than {FRESH_S:g}s ({FRESHNESS_RULE} = {age})")
    return None


def host(view: LocalView, f: Field) -> list[Reason]:
    return per_instance(view, registered(view), _host_cause)


def freshness(view: LocalView, f: Field) -> list[Reason]:
    """A member without a host sample age makes the pool's age unknown. A registered
    member is diagnosed by name; a gateway's endpoint or a silent self-declared member
    may have no exporter answering for it at all."""
    found = host(view, f)
    if found or not declared(view):
        return found
    if not registered(view):
        return [Reason(Code.INSTANCE_EXPORTER_DOWN,
                       "no Instance exporter that declares the pool answers its scrapes "
                       f"({c.COLLECTOR_SUCCESS.name} absent for all)")]
    return [Reason(Code.INSTANCE_EXPORTER_DOWN,
                   "every Instance exporter answering for the pool serves a host sample "
                   "age, but the pool counts more members (instances.total): a gateway "
                   "endpoint without an Instance exporter, or a self-declared member "
                   f"that stopped answering within {MEMBER_MEMORY} (still counted, as "
                   "stale); its age is unknown")]


def network(view: LocalView, f: Field) -> list[Reason]:
    """Host causes first; with every member's host sampled, it is the rate's window."""
    return host(view, f) or [Reason(Code.RATE_NOT_COVERED,
                                    f"every member's host is sampled, but {f.null_when}")]


def _gpu_cause(view: LocalView, instance_id: str) -> tuple[Code, str] | None:
    host_cause = _host_cause(view, instance_id)
    if host_cause is not None:
        return host_cause
    s = view.series.of(instance_id)
    unavailable = sorted({labels.get("reason", "") for labels, value
                          in s.get(c.COLLECTOR_UNAVAILABLE.name, [])
                          if labels.get("collector") == "gpu" and value == 1})
    if unavailable:
        return (Code.NO_GPU,
                f"the host has no NVIDIA driver ({c.COLLECTOR_UNAVAILABLE.name} reason="
                f"{', '.join(unavailable)}): no GPU data, which is neither failing nor idle")
    reasons = _failed(view, instance_id, "gpu")
    if reasons is not None:
        if NVML_UNAVAILABLE in reasons:
            return (Code.NVML_UNAVAILABLE,
                    "NVML cannot be loaded or initialised where GPUs are expected "
                    "(--collector.gpu without a driver, a driver NVML refuses, or pynvml "
                    "missing beside one): GPU readings are absent, not zero")
        return (Code.GPU_COLLECTOR_FAILED, f"the GPU collector fails ({', '.join(reasons)})")
    if view.collector(instance_id, "gpu")["success"] is None:
        # No health at all: the collector is switched off, or unavailable and its
        # info series not among the series read.
        return (Code.NO_GPU,
                f"the Instance exporter measures no GPU (no {c.COLLECTOR_SUCCESS.name} for "
                "its gpu collector): the host has no NVIDIA driver "
                f"({c.COLLECTOR_UNAVAILABLE.name} says so) or --no-collector.gpu; no GPU "
                "data, which is neither failing nor idle")
    devices = one(s.get(c.GPU_DEVICES.name, []))
    if devices is None or devices == 0:
        return (Code.NO_GPU, f"the host has no GPU ({c.GPU_DEVICES.name} = {devices})")
    if not any(v == 1 for _, v in s.get(c.GPU_HEALTHY.name, [])):
        return (Code.GPUS_UNHEALTHY,
                "every GPU fails its reads: unhealthy GPUs are neither used nor free")
    return None


def gpu(view: LocalView, f: Field) -> list[Reason]:
    return per_instance(view, registered(view), _gpu_cause)
