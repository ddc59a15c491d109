"""The engine's causes, over the pool's alive members: the engine collector, the
KV cache, admission and capacity.

These fields are measured over alive Instances only, so none alive is the whole
explanation; otherwise each alive member's cause is named: its exporter down, no
engine collector configured, the engine unreachable or not exposing the value, or
the engine asleep (which offers no capacity whatever is configured).
"""

from __future__ import annotations

from poolscope.bridge.local_view import LocalView, asleep
from poolscope.contract import catalog as c
from poolscope.contract.fields import Field
from poolscope.proxy_bridge.diagnosis_instance import exporter_down
from poolscope.proxy_bridge.diagnosis_members import alive, alive_or, per_instance
from poolscope.proxy_bridge.diagnosis_reason import Code, Reason

TGI_SOURCE = c.engine_source("tgi")


def _engine_cause(view: LocalView, instance_id: str) -> tuple[Code, str] | None:
    down = exporter_down(view, instance_id)
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
    return alive_or(view, lambda: per_instance(view, alive(view), _engine_cause))


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
    return alive_or(view, lambda: per_instance(view, alive(view), _kv_cause))


def admission(view: LocalView, f: Field) -> list[Reason]:
    return alive_or(view, lambda: per_instance(view, alive(view), exporter_down))


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
    return alive_or(view, lambda: per_instance(view, alive(view), cause))
