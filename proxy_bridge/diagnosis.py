"""Why a field of this pool's summary is null, diagnosed from the running system.

fields.py says in general when a field is null; this looks at the pool's raw series
at the summary's evaluation time and names the cause that applies now: the Proxy
exporter is not scraped, an Instance exporter is down, the engine is unreachable or
does not expose the value, there is no GPU or no NVIDIA driver (a state, not a
failure), NVML fails where GPUs were asked for, or the input is not wired
(no queue capacity configured). Causes are checked in the order the data flows:
a silent Proxy-side exporter (embedded or gateway) explains every null of a field
only it measures, while the Instance-side fields are diagnosed per member (the
Proxy's registered Instances, or, with no Proxy-side exporter, the Instance
exporters that declare the pool); per-Instance causes are grouped with the
Instances they hit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from poolscope.bridge.local_queries import FRESHNESS_RULE
from poolscope.bridge.local_view import LocalView, asleep
from poolscope.bridge.pool_series import one
from poolscope.contract import catalog as c
from poolscope.contract.fields import DATA_QUALITY_ROLLUP, FIELDS, Field, Input
from poolscope.contract.thresholds import FRESH_S, MEMBER_MEMORY

NVML_UNAVAILABLE = "nvml_unavailable"  # poolscope.exporters.common.health.ErrorReason
TGI_SOURCE = c.engine_source("tgi")


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


Check = Callable[[LocalView, Field], list[Reason]]


# --- the Proxy side: the fields only a Proxy-side exporter measures ----------------

# Fields no Instance exporter can stand in for (Field.proxy_side): a silent Proxy-side
# exporter is their whole explanation. The others are measured per member whoever
# declares it.
PROXY_SIDE = frozenset(f.path for f in FIELDS if f.proxy_side)


def proxy(view: LocalView) -> list[Reason]:
    if not view.proxy_reporting:
        down = [t for t in view.targets() if t["up"] is False]
        where = "; scrape targets down (up==0): " + ", ".join(
            f"{t['job']}/{t['instance']}" for t in down) if down else ""
        return [Reason(Code.PROXY_EXPORTER_DOWN,
                       f"no {c.PROXY_COLLECTOR_SUCCESS.name} series for "
                       f"proxy_id={view.proxy_id}: no Proxy-side exporter (embedded Proxy "
                       "or gateway adapter) is scraped for this pool, so what only it "
                       "measures is unknown" + where)]
    failed = [labels.get("collector", "") for labels, value
              in view.series.pool.get(c.PROXY_COLLECTOR_SUCCESS.name, []) if value == 0]
    if failed:
        reasons = sorted({labels.get("reason", "") for labels, value
                          in view.series.pool.get(c.PROXY_COLLECTOR_ERRORS.name, [])
                          if value and value > 0})
        why = f" (errors counted: {', '.join(reasons)})" if reasons else ""
        what = ("its last read of the gateway's page failed" if "gateway" in failed
                else "it failed to read its own state")
        return [Reason(Code.PROXY_COLLECTOR_FAILED,
                       f"the Proxy-side exporter is scraped but {what} "
                       f"({c.PROXY_COLLECTOR_SUCCESS.name} == 0){why}")]
    if view.gateway:
        if one(view.series.pool.get(c.POOL_INSTANCES_REGISTERED.name, [])) == 0:
            return [Reason(Code.NO_INSTANCES, "the gateway lists no member of the pool "
                           f"({c.POOL_INSTANCES_REGISTERED.name} == 0)")]
    elif not _registered(view):
        return [Reason(Code.NO_INSTANCES, "the Proxy reports no registered Instance "
                       f"({c.PROXY_INSTANCE_REGISTERED.name} absent)")]
    return []


def _declared(view: LocalView) -> bool:
    """Per-Instance causes are looked for among the Instance exporters that declare the
    pool: there is no registry, or a gateway's that names endpoints its own way."""
    return not view.proxy_reporting or view.gateway


def _registered(view: LocalView) -> list[str]:
    """The pool's members: registered at the embedded Proxy, or else every Instance
    whose exporter declares the pool."""
    if _declared(view):
        return [i for i in view.instance_ids if c.COLLECTOR_SUCCESS.name in view.series.of(i)]
    return [i for i in view.instance_ids
            if one(view.series.of(i).get(c.PROXY_INSTANCE_REGISTERED.name, [])) == 1]


def _alive(view: LocalView) -> list[str]:
    if _declared(view):
        return _registered(view)  # answering its scrapes now
    return [i for i in _registered(view)
            if one(view.series.of(i).get(c.PROXY_INSTANCE_ALIVE.name, [])) == 1]


def _grouped(found: Iterable[tuple[str, Code, str]]) -> list[Reason]:
    """Per-Instance causes, one Reason per (code, detail) with the Instances it hit."""
    groups: dict[tuple[Code, str], list[str]] = {}
    for instance_id, code, detail in found:
        groups.setdefault((code, detail), []).append(instance_id)
    return [Reason(code, detail, tuple(ids)) for (code, detail), ids in groups.items()]


def _per_instance(view: LocalView, instances: list[str],
                  cause: Callable[[LocalView, str], tuple[Code, str] | None]) -> list[Reason]:
    found = []
    for i in instances:
        hit = cause(view, i)
        if hit is not None:
            found.append((i, *hit))
    return _grouped(found)


# --- the Instance exporter ------------------------------------------------------

def _exporter_down(view: LocalView, instance_id: str) -> tuple[Code, str] | None:
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
    down = _exporter_down(view, instance_id)
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
    return _per_instance(view, _registered(view), _host_cause)


def freshness(view: LocalView, f: Field) -> list[Reason]:
    """A member without a host sample age makes the pool's age unknown. A registered
    member is diagnosed by name; a gateway's endpoint or a silent self-declared member
    may have no exporter answering for it at all."""
    found = host(view, f)
    if found or not _declared(view):
        return found
    if not _registered(view):
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
    return _per_instance(view, _registered(view), _gpu_cause)


# --- the engine -----------------------------------------------------------------

def _engine_cause(view: LocalView, instance_id: str) -> tuple[Code, str] | None:
    down = _exporter_down(view, instance_id)
    if down is not None:
        return down
    state = view.collector(instance_id, "engine")
    if state["success"] is None:
        return (Code.ENGINE_NOT_CONFIGURED,
                "the Instance exporter has no engine collector (--engine-metrics-url unset)")
    if state["success"] is False:
        return (Code.ENGINE_UNREACHABLE,
                f"the engine's /metrics cannot be read "
                f"({', '.join(state['reasons']) or 'no reason counted'})")
    return None


def engine(view: LocalView, f: Field) -> list[Reason]:
    return _alive_or(view, lambda: _per_instance(view, _alive(view), _engine_cause))


def _kv_cause(view: LocalView, instance_id: str) -> tuple[Code, str] | None:
    cause = _engine_cause(view, instance_id)
    if cause is not None:
        return cause
    s = view.series.of(instance_id)
    if c.ENGINE_KV_CACHE_USAGE.name in s:
        return None
    source = {labels.get("source") for labels, _ in s.get(c.ENGINE_REQUESTS_RUNNING.name, [])}
    engine_name = ", ".join(sorted(x for x in source if x)) or "the engine"
    why = " (TGI has no KV-cache metric)" if TGI_SOURCE in source else ""
    return (Code.ENGINE_NOT_EXPOSING,
            f"{engine_name} does not expose KV-cache usage{why}")


def kv_cache(view: LocalView, f: Field) -> list[Reason]:
    return _alive_or(view, lambda: _per_instance(view, _alive(view), _kv_cause))


def _alive_or(view: LocalView, per_instance: Callable[[], list[Reason]]) -> list[Reason]:
    """Fields over alive Instances: none alive is the whole explanation."""
    if not _alive(view):
        if _declared(view):
            return [Reason(Code.NO_ALIVE_INSTANCES,
                           "no Instance exporter that declares the pool answers its scrapes "
                           f"({c.COLLECTOR_SUCCESS.name} absent for all)")]
        return [Reason(Code.NO_ALIVE_INSTANCES,
                       "no registered Instance's heartbeat is on time "
                       f"({c.PROXY_INSTANCE_ALIVE.name} == 1 for none)")]
    return per_instance()


def admission(view: LocalView, f: Field) -> list[Reason]:
    return _alive_or(view, lambda: _per_instance(view, _alive(view), _exporter_down))


def capacity(view: LocalView, f: Field) -> list[Reason]:
    """An asleep engine comes first: it has no capacity whatever is configured (the
    Instance exporter publishes none, the rule takes the Proxy's away), so it is the
    cause even beside a configured value."""
    def cause(v: LocalView, instance_id: str) -> tuple[Code, str] | None:
        s = v.series.of(instance_id)
        if asleep(s):
            return (Code.ENGINE_ASLEEP,
                    "the engine is asleep (admission state asleep: its page says so, as "
                    "vLLM's sleep mode does): it offers no capacity until woken")
        if c.PROXY_INSTANCE_CAPACITY.name in s or c.INSTANCE_CAPACITY.name in s:
            return None
        return (Code.NOT_WIRED,
                "no capacity configured at the Proxy or the Instance exporter, and none "
                "learned yet (learning needs the engine seen running a request)")
    return _alive_or(view, lambda: _per_instance(view, _alive(view), cause))


# --- the Proxy's queues ---------------------------------------------------------

def queue_depth(view: LocalView, f: Field) -> list[Reason]:
    queue = f.matchers.get("queue", "")
    if one(view.series.pool.get(c.PROXY_QUEUE_DEPTH.name, []), queue=queue) is None:
        return [Reason(Code.NOT_WIRED,
                       f"the Proxy does not expose its {queue} queue "
                       f"({c.PROXY_QUEUE_DEPTH.name}{{queue=\"{queue}\"}} absent)")]
    return []


def queue_pressure(view: LocalView, f: Field) -> list[Reason]:
    if c.PROXY_QUEUE_CAPACITY.name not in view.series.pool:
        return [Reason(Code.NOT_WIRED,
                       "no queue has a configured capacity "
                       f"({c.PROXY_QUEUE_CAPACITY.name} absent): unbounded queues have no "
                       "pressure to report")]
    return []


def dispatch_only(view: LocalView, f: Field) -> list[Reason]:
    if view.gateway:
        return [Reason(Code.NOT_WIRED, "the Proxy side is a gateway adapter, and only the "
                       "embedded Proxy's dispatch path knows when each Instance was last "
                       "sent a request")]
    return []


def liveness(view: LocalView, f: Field) -> list[Reason]:
    if view.gateway and c.POOL_INSTANCES_STALE.name not in view.series.pool:
        return [Reason(Code.NOT_WIRED, "the gateway reports no per-member liveness "
                       f"({c.POOL_INSTANCES_STALE.name} absent; GIE's endpoint picker "
                       "counts ready pods only)")]
    return []


def qps(view: LocalView, f: Field) -> list[Reason]:
    return [Reason(Code.NO_TRAFFIC, f"the Proxy is reporting, but {f.null_when}")]


def in_turn(*checks: Check) -> Check:
    """Every check's reasons, in the order the field lists its inputs."""
    def check(view: LocalView, f: Field) -> list[Reason]:
        return [r for ch in checks for r in ch(view, f)]
    return check


# One check per input that can null a field. Each field's entry in fields.py names
# its inputs, so a new field needs no edit here; a new kind of input needs its check.
INPUT_CHECKS: dict[Input, Check] = {
    Input.LIVENESS: liveness,
    Input.DISPATCH: dispatch_only,
    Input.TRAFFIC: qps,
    Input.CAPACITY: capacity,
    Input.QUEUE_CAPACITY: queue_pressure,
    Input.QUEUE: queue_depth,
    Input.ENGINE: engine,
    Input.KV_CACHE: kv_cache,
    Input.HOST: host,
    Input.GPU: gpu,
    Input.NETWORK: network,
    Input.FRESHNESS: freshness,
    Input.ADMISSION: admission,
}
CHECKS: dict[str, Check] = {f.path: in_turn(*(INPUT_CHECKS[i] for i in f.inputs))
                            for f in FIELDS}
_FIELDS = {f.path: f for f in FIELDS}


def null_reasons(view: LocalView, path: str) -> list[Reason]:
    """Why the field at `path` is null now; the rollup itself when no input explains it."""
    f = _FIELDS.get(path)
    if f is None:  # data_quality: null only when no rollup mentions the pool at all
        return proxy(view) or [Reason(Code.ROLLUP_ABSENT,
                                      f"no {DATA_QUALITY_ROLLUP} series for this pool "
                                      "(are the rules in rules/ loaded?)")]
    found = (proxy(view) if path in PROXY_SIDE else []) or CHECKS[path](view, f)
    return found or [Reason(Code.ROLLUP_ABSENT,
                            f"its inputs are measured but {f.rollup} has no value for this "
                            f"pool (are the rules in rules/ loaded?); null when {f.null_when}")]
