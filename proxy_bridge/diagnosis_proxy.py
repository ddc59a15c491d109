"""The Proxy side's causes: what only a Proxy-side exporter (the embedded Proxy or a
gateway adapter) measures, and what it does not wire.

A silent Proxy-side exporter is the whole explanation of a field only it measures
(`proxy`, asked first for those fields); the other checks here name an input the
Proxy side does not provide at all: a queue it does not expose, no queue capacity,
no dispatch path (a gateway), no per-member liveness, or no traffic yet.
"""

from __future__ import annotations

from poolscope.bridge.local_view import LocalView
from poolscope.bridge.pool_series import one
from poolscope.contract import catalog as c
from poolscope.contract.fields import Field
from poolscope.proxy_bridge.diagnosis_members import registered
from poolscope.proxy_bridge.diagnosis_reason import Code, Reason


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
    elif not registered(view):
        return [Reason(Code.NO_INSTANCES, "the Proxy reports no registered Instance "
                       f"({c.PROXY_INSTANCE_REGISTERED.name} absent)")]
    return []


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
