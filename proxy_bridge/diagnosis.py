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

This module is the table from a field's inputs to their checks; the checks live by
the side they look at: diagnosis_proxy (the Proxy side), diagnosis_instance (the
Instance exporter's host and GPUs), diagnosis_engine (the engine), over the members
diagnosis_members picks, answering in diagnosis_reason's terms. Everything read from
fields.FIELDS is computed here, so reloading this module follows a changed catalog.
"""

from __future__ import annotations

from poolscope.bridge.local_view import LocalView
from poolscope.contract.fields import DATA_QUALITY_ROLLUP, FIELDS, Field, Input
from poolscope.proxy_bridge.diagnosis_engine import admission, capacity, engine, kv_cache
from poolscope.proxy_bridge.diagnosis_instance import freshness, gpu, host, network
from poolscope.proxy_bridge.diagnosis_proxy import (
    dispatch_only,
    liveness,
    proxy,
    qps,
    queue_depth,
    queue_pressure,
)
from poolscope.proxy_bridge.diagnosis_reason import Check, Code, Reason

# Fields no Instance exporter can stand in for (Field.proxy_side): a silent Proxy-side
# exporter is their whole explanation. The others are measured per member whoever
# declares it.
PROXY_SIDE = frozenset(f.path for f in FIELDS if f.proxy_side)


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
