"""One pool drilled into: its Instances, their GPUs and the last 15 minutes, for the
pool page and `poolscope-status POOL`.

Built from the document `/debug/pool_detail/{proxy_id}` serves, so the page, the
terminal and `--json` show the same numbers. The Instances come from the pool's own
series in Prometheus (the local view the Proxy bridge serves too), read as of the
rollups' evaluation, so rows and the pool's counts come from the same samples.
Unknown stays None, and each verdict follows the rule behind the pool's count:

- liveness from the Proxy's heartbeat table while a Proxy-side exporter reports the
  pool, else from whether the Instance exporter answers its scrapes (a pool without
  one: its members are whoever declares it). A gateway names its members as its
  endpoints, not as the Instance exporters do, so an exporter's row there is judged by
  its scrapes, not called unregistered;
- resource data is fresh while the host sample is at most FRESH_S old, as the pool's
  with_resource count has it, and missing otherwise, absent series included:
  Prometheus answered, and had none;
- load is what the Proxy has in flight on the Instance, else the engine's running plus
  waiting, against the capacity the pool's rollup would count for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from poolscope.bridge.trends import Trends
from poolscope.contract.thresholds import FRESH_S
from poolscope.scheduler_bridge.client import parse_pool
from poolscope.scheduler_bridge.status.model import (
    PERCENT,
    PoolView,
    TrendView,
    age_text,
    count,
    pool_view,
    seconds,
)

ALIVE, STALE, UNREGISTERED = "alive", "stale", "unregistered"
FRESH, MISSING = "fresh", "missing"
PROXY_LOAD, ENGINE_LOAD = "proxy", "engine"


@dataclass(frozen=True)
class GpuView:
    """One GPU; usage only while healthy (an unhealthy GPU is neither used nor free)."""

    gpu: str
    model: str
    healthy: bool | None
    util_ratio: float | None
    memory_used_ratio: float | None


@dataclass(frozen=True)
class InstanceGpus:
    """An Instance's GPUs of one model, by health (a GPU whose health series is
    ambiguous counts in neither)."""

    model: str
    healthy: int
    unhealthy: int


@dataclass(frozen=True)
class InstanceView:
    instance_id: str
    liveness: str | None  # alive | stale | unregistered; None: nothing says
    resource: str  # fresh | missing
    resource_age_s: float | None
    admission_state: str | None
    load: float | None
    load_source: str | None  # proxy | engine
    capacity: float | None
    load_ratio: float | None
    kv_cache_ratio: float | None
    cpu_ratio: float | None
    memory_used_ratio: float | None
    idle_s: float | None  # None: never dispatched, or not counted (unknown, not idle)
    gpu_models: tuple[InstanceGpus, ...]
    gpus: tuple[GpuView, ...] | None  # None: no GPU data (no GPU, or none read)
    failing: tuple[str, ...]  # "collector: reason" for each collector failing now


@dataclass(frozen=True)
class QueueView:
    name: str
    depth: float | None
    capacity: float | None
    oldest_age_s: float | None


@dataclass(frozen=True)
class PoolDetailView:
    proxy_id: str
    generated_at: float
    stale: bool
    age_s: float | None
    pool: PoolView
    instances: tuple[InstanceView, ...] | None  # None: the series could not be read
    instances_error: str | None
    proxy_reporting: bool | None
    queues: tuple[QueueView, ...]
    trend: TrendView | None
    trend_error: str | None

    def age(self, digits: int = 1) -> str:
        return age_text(self.age_s, digits)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def build_pool_detail(doc: Mapping[str, Any]) -> PoolDetailView:
    """The view of one `/debug/pool_detail/{proxy_id}` document; KeyError, TypeError
    or ValueError when it is not one."""
    proxy_id = str(doc["proxy_id"])
    summary, local, trends = doc["summary"], doc["local"], doc["trends"]
    reporting = None if local is None else bool(local["proxy"]["reporting"])
    gateway = local is not None and bool(local["proxy"]["gateway"])
    return PoolDetailView(
        proxy_id=proxy_id,
        generated_at=float(doc["generated_at"]),
        stale=bool(doc["stale"]),
        age_s=None if doc.get("age_s") is None else float(doc["age_s"]),
        pool=pool_view(parse_pool(summary)),
        instances=None if local is None else tuple(
            _instance(i, bool(reporting), gateway) for i in local["instances"]),
        instances_error=doc.get("local_error"),
        proxy_reporting=reporting,
        queues=() if local is None else tuple(
            QueueView(name, q["depth"], q["capacity"], q["oldest_age_s"])
            for name, q in sorted(local["queues"].items())),
        trend=None if trends is None else _trend(Trends.from_dict(trends), proxy_id),
        trend_error=doc.get("trends_error"),
    )


def _trend(trends: Trends, proxy_id: str) -> TrendView | None:
    pool = trends.pools.get(proxy_id)
    return None if pool is None else TrendView.of(trends, pool)


def _instance(doc: Mapping[str, Any], proxy_reporting: bool, gateway: bool) -> InstanceView:
    load, source = _load(doc)
    age = doc["host_sample_age_s"]
    capacity = doc["capacity"]["value"]
    gpus = tuple(_gpu(g) for g in doc["gpus"])
    return InstanceView(
        instance_id=str(doc["instance_id"]),
        liveness=_liveness(doc, proxy_reporting, gateway),
        resource=FRESH if age is not None and 0 <= age <= FRESH_S else MISSING,
        resource_age_s=age,
        admission_state=doc["admission_state"],
        load=load, load_source=source, capacity=capacity,
        load_ratio=None if load is None or capacity is None or capacity <= 0
        else load / capacity,
        kv_cache_ratio=doc["engine"]["kv_cache_usage_ratio"],
        cpu_ratio=None if doc["cpu_percent"] is None else doc["cpu_percent"] / PERCENT,
        memory_used_ratio=doc["memory_used_ratio"],
        idle_s=doc["idle_s"],
        gpu_models=_by_model(gpus),
        gpus=gpus or None,
        failing=tuple(_failing(doc["collectors"])),
    )


def _liveness(doc: Mapping[str, Any], proxy_reporting: bool, gateway: bool) -> str | None:
    registered = doc["registered"]
    if not proxy_reporting or (gateway and registered is False):
        alive = doc["host_scraped"]  # judged by its scrapes
    elif registered is False:
        return UNREGISTERED
    else:
        alive = doc["alive"]
    return None if alive is None else ALIVE if alive else STALE


def load_text(i: InstanceView) -> str:
    """'2 / 8', marked when the load is the engine's queue rather than the Proxy's count."""
    text = f"{count(i.load)} / {count(i.capacity)}"
    return f"{text} (engine)" if i.load_source == ENGINE_LOAD else text


def gpus_text(models: Sequence[InstanceGpus]) -> str:
    """'4 NVIDIA H100 (1 unhealthy), 2 NVIDIA L4': what an Instance holds; '' for none."""
    return ", ".join(f"{g.healthy + g.unhealthy} {g.model}"
                     + (f" ({g.unhealthy} unhealthy)" if g.unhealthy else "") for g in models)


def resource_text(i: InstanceView) -> str:
    """The resource verdict with the sample's age, as both renderings show it."""
    if i.resource_age_s is None:
        return i.resource
    return f"{i.resource} {seconds(i.resource_age_s)}"


def _load(doc: Mapping[str, Any]) -> tuple[float | None, str | None]:
    if doc["proxy_inflight"] is not None:
        return doc["proxy_inflight"], PROXY_LOAD
    running, waiting = doc["engine"]["running"], doc["engine"]["waiting"]
    if running is None or waiting is None:
        return None, None
    return running + waiting, ENGINE_LOAD


def _gpu(doc: Mapping[str, Any]) -> GpuView:
    util = doc["util_percent"]
    return GpuView(str(doc["gpu"]), str(doc["gpu_model"]), doc["healthy"],
                   None if util is None else util / PERCENT, doc["memory_used_ratio"])


def _by_model(gpus: Sequence[GpuView]) -> tuple[InstanceGpus, ...]:
    models = sorted({g.model for g in gpus})
    return tuple(InstanceGpus(m, sum(g.model == m and g.healthy is True for g in gpus),
                              sum(g.model == m and g.healthy is False for g in gpus))
                 for m in models)


def _failing(collectors: Mapping[str, Mapping[str, Any]]) -> list[str]:
    return [f"{name}: {c['reasons'][0] if c['reasons'] else 'failing'}"
            for name, c in sorted(collectors.items()) if c["success"] is False]
