"""Whose causes count: the pool's members, and their causes grouped into Reasons.

The Instance-side fields are diagnosed per member. Who the members are depends on
who reports the pool: the embedded Proxy's registered Instances, or, with no
Proxy-side exporter or with a gateway (which names its endpoints its own way), the
Instance exporters that declare the pool. One home for that choice keeps every
per-Instance check looking at the same members the pool's counts do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from poolscope.bridge.local_view import LocalView
from poolscope.bridge.pool_series import one
from poolscope.contract import catalog as c
from poolscope.proxy_bridge.diagnosis_reason import Cause, Code, Reason


def declared(view: LocalView) -> bool:
    """Per-Instance causes are looked for among the Instance exporters that declare the
    pool: there is no registry, or a gateway's that names endpoints its own way."""
    return not view.proxy_reporting or view.gateway


def registered(view: LocalView) -> list[str]:
    """The pool's members: registered at the embedded Proxy, or else every Instance
    whose exporter declares the pool."""
    if declared(view):
        return [i for i in view.instance_ids if c.COLLECTOR_SUCCESS.name in view.series.of(i)]
    return [i for i in view.instance_ids
            if one(view.series.of(i).get(c.PROXY_INSTANCE_REGISTERED.name, [])) == 1]


def alive(view: LocalView) -> list[str]:
    if declared(view):
        return registered(view)  # answering its scrapes now
    return [i for i in registered(view)
            if one(view.series.of(i).get(c.PROXY_INSTANCE_ALIVE.name, [])) == 1]


def _grouped(found: Iterable[tuple[str, Code, str]]) -> list[Reason]:
    """Per-Instance causes, one Reason per (code, detail) with the Instances it hit."""
    groups: dict[tuple[Code, str], list[str]] = {}
    for instance_id, code, detail in found:
        groups.setdefault((code, detail), []).append(instance_id)
    return [Reason(code, detail, tuple(ids)) for (code, detail), ids in groups.items()]


def per_instance(view: LocalView, instances: list[str], cause: Cause) -> list[Reason]:
    found = []
    for i in instances:
        hit = cause(view, i)
        if hit is not None:
            found.append((i, *hit))
    return _grouped(found)


def alive_or(view: LocalView, per_member: Callable[[], list[Reason]]) -> list[Reason]:
    """Fields over alive Instances: none alive is the whole explanation."""
    if not alive(view):
        if declared(view):
            return [Reason(Code.NO_ALIVE_INSTANCES,
                           "no Instance exporter that declares the pool answers its scrapes "
                           f"({c.COLLECTOR_SUCCESS.name} absent for all)")]
        return [Reason(Code.NO_ALIVE_INSTANCES,
                       "no registered Instance's heartbeat is on time "
                       f"({c.PROXY_INSTANCE_ALIVE.name} == 1 for none)")]
    return per_member()
