"""What can I stop: the Instances that hold GPUs nobody has asked for, for the fleet's
status page, `poolscope-status --idle` and `GET /debug/idle_instances`.

On a fleet with more models than cards this is the first question an operator asks,
and a wrong answer stops a replica someone needs. So the view is read from the same
samples as the pools' lines, and keeps what it does not know apart:

- an Instance is idle when its Proxy has not dispatched to it for more than IDLE_S:
  the test the Proxy applies to its own pool count (exporters/proxy/collector.py), so
  the pool's `instances.idle` and the rows listed here count the same Instances;
- an Instance its Proxy holds (`poolscope_proxy_instance_registered`) but never
  dispatched to since it started has no idle time (`..._idle_seconds` is absent): it
  is listed apart, as the pool's `instances.idle_unknown` counts it, never as idle, so
  a Proxy that just restarted nominates nothing;
- only an embedded Proxy measures idleness: a pool whose summary has no idle count
  (a gateway, no Proxy-side exporter) is named as not measured and none of its
  Instances is listed;
- an Instance's GPUs are its exporter's per-model counts (`poolscope_instance_gpus`),
  the series the fleet's per-model capacity is rolled up from, so the cards held by
  idle Instances are counted as the totals beside them are. An Instance without GPU
  series has no cards anyone knows of (no GPU, or none read): None, in no model.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from poolscope.bridge.local_view import as_count, as_flag
from poolscope.bridge.pool_series import PoolSeries, one
from poolscope.bridge.summary import Sample
from poolscope.contract import catalog as c
from poolscope.contract.thresholds import IDLE_S
from poolscope.scheduler_bridge.status.model import (
    FleetView,
    GpuModelView,
    PoolView,
    age_text,
    count,
)
from poolscope.scheduler_bridge.status.pool_view import InstanceGpus

# What the view reads of each Instance, fleet-wide, in one instant query.
IDLE_FAMILIES: tuple[c.Family, ...] = (
    c.PROXY_INSTANCE_REGISTERED, c.PROXY_INSTANCE_ALIVE, c.PROXY_INSTANCE_IDLE, c.INSTANCE_GPUS)


@dataclass(frozen=True)
class IdleInstance:
    proxy_id: str
    instance_id: str
    idle_s: float | None  # None: never dispatched to since its Proxy started
    alive: bool | None  # the Proxy's heartbeat verdict; None: not read
    gpus: tuple[InstanceGpus, ...] | None  # None: no GPU data

    def cards(self, model: str) -> int:
        """Its GPUs of `model`, healthy or not: all of them go with it when it stops."""
        return sum(g.healthy + g.unhealthy for g in self.gpus or () if g.model == model)


@dataclass(frozen=True)
class IdlePool:
    proxy_id: str
    idle: int | None  # the summary's instances.idle
    idle_unknown: int | None  # the summary's instances.idle_unknown
    idle_instances: tuple[IdleInstance, ...]  # longest idle first
    unknown_instances: tuple[IdleInstance, ...]
    # The rows are as many as the summary counts. Not so when a scrape landed between
    # the rules' evaluation and this read: the renderings say so rather than pick one.
    agrees: bool


@dataclass(frozen=True)
class HeldGpus:
    """One GPU model: the fleet's capacity (as the GPU table has it) and the cards that
    idle Instances, and Instances of unknown idleness, hold."""

    model: str
    total: int | None
    used: float | None
    free: float | None
    unhealthy: int | None
    idle: int
    idle_unknown: int


@dataclass(frozen=True)
class IdleView:
    generated_at: float  # when the rules wrote what the rows and counts were read from
    stale: bool
    age_s: float | None
    idle_threshold_s: float
    pools: tuple[IdlePool, ...]  # the pools whose idleness is measured
    unmeasured: tuple[str, ...]  # the others: no Proxy-side source that measures it
    gpu_models: tuple[HeldGpus, ...]

    @property
    def idle_instances(self) -> list[IdleInstance]:
        return [i for p in self.pools for i in p.idle_instances]

    @property
    def unknown_instances(self) -> list[IdleInstance]:
        return [i for p in self.pools for i in p.unknown_instances]

    def disagreements(self) -> list[str]:
        """For each pool whose rows and counts differ, why: a scrape landed between
        the rules' evaluation and the Instances' read."""
        return [f"{p.proxy_id}: the summary counts {count(p.idle)} idle and "
                f"{count(p.idle_unknown)} idle unknown, the Instances read "
                f"{len(p.idle_instances)} and {len(p.unknown_instances)} (a scrape landed "
                f"between the two reads; the next refresh settles it)"
                for p in self.pools if not p.agrees]

    def age(self, digits: int = 1) -> str:
        return age_text(self.age_s, digits)

    def as_dict(self) -> dict[str, Any]:
        """The view as JSON-ready data: what the route serves and `--json` prints."""
        return asdict(self)


def build_idle_view(fleet: FleetView, series: Mapping[str, PoolSeries],
                    evaluated_at: float) -> IdleView:
    """The view of `fleet` (the pools' lines) and each pool's IDLE_FAMILIES series,
    read as of `evaluated_at`, by proxy_id."""
    pools = tuple(_pool(p, series.get(p.proxy_id, PoolSeries()))
                  for p in fleet.pools if p.idle is not None)
    return IdleView(
        generated_at=evaluated_at, stale=fleet.stale, age_s=fleet.age_s,
        idle_threshold_s=IDLE_S, pools=pools,
        unmeasured=tuple(p.proxy_id for p in fleet.pools if p.idle is None),
        gpu_models=_held(fleet.gpu_models, pools))


def by_pool(samples: Iterable[Sample]) -> dict[str, PoolSeries]:
    """The fleet's samples indexed per pool, as the pool's own read would index them."""
    grouped: dict[str, list[Sample]] = {}
    for sample in samples:
        grouped.setdefault(sample[0].get("proxy_id", ""), []).append(sample)
    return {pid: PoolSeries.index(rows) for pid, rows in grouped.items()}


def _pool(p: PoolView, s: PoolSeries) -> IdlePool:
    held = [_instance(p.proxy_id, iid, s.of(iid)) for iid in sorted(s.instances)
            if one(s.of(iid).get(c.PROXY_INSTANCE_REGISTERED.name, [])) is not None]
    # Strictly more than the threshold, as the Proxy counts (exporters/proxy/collector.py).
    idle = sorted((i for i in held if i.idle_s is not None and i.idle_s > IDLE_S),
                  key=lambda i: -(i.idle_s or 0.0))
    unknown = tuple(i for i in held if i.idle_s is None)
    return IdlePool(p.proxy_id, p.idle, p.idle_unknown, tuple(idle), unknown,
                    agrees=(p.idle, p.idle_unknown) == (len(idle), len(unknown)))


def _instance(proxy_id: str, instance_id: str,
              s: Mapping[str, list[Sample]]) -> IdleInstance:
    return IdleInstance(proxy_id, instance_id,
                        idle_s=one(s.get(c.PROXY_INSTANCE_IDLE.name, [])),
                        alive=as_flag(one(s.get(c.PROXY_INSTANCE_ALIVE.name, []))),
                        gpus=_gpus(s.get(c.INSTANCE_GPUS.name, [])))


def _gpus(samples: Sequence[Sample]) -> tuple[InstanceGpus, ...] | None:
    """Per model, healthy and unhealthy; None without series, or when a count cannot be
    read (two disagreeing series, a fraction): no GPU data rather than a wrong count."""
    out = []
    for model in sorted({labels.get("gpu_model", "") for labels, _ in samples}):
        healthy, unhealthy = (as_count(one(samples, gpu_model=model, health=h))
                              for h in c.GPU_HEALTH)
        if healthy is None or unhealthy is None:
            return None
        out.append(InstanceGpus(model, healthy, unhealthy))
    return tuple(out) or None


def _held(capacity: Sequence[GpuModelView], pools: Sequence[IdlePool]) -> tuple[HeldGpus, ...]:
    idle = [i for p in pools for i in p.idle_instances]
    unknown = [i for p in pools for i in p.unknown_instances]
    by_model = {g.model: g for g in capacity}
    models = sorted({*by_model, *(g.model for i in (*idle, *unknown) for g in i.gpus or ())})
    out = []
    for model in models:
        g = by_model.get(model)
        out.append(HeldGpus(
            model, total=None if g is None else g.total, used=None if g is None else g.used,
            free=None if g is None else g.free, unhealthy=None if g is None else g.unhealthy,
            idle=sum(i.cards(model) for i in idle),
            idle_unknown=sum(i.cards(model) for i in unknown)))
    return tuple(out)


# --- read back from JSON (the CLI's side of the route) ---------------------------

def parse_idle_view(doc: Mapping[str, Any]) -> IdleView:
    """The view of a `GET /debug/idle_instances` body; KeyError, TypeError or
    ValueError when it is not one. Fields a later bridge adds are ignored."""
    pools = tuple(IdlePool(
        str(p["proxy_id"]), p["idle"], p["idle_unknown"],
        tuple(map(_parse_instance, p["idle_instances"])),
        tuple(map(_parse_instance, p["unknown_instances"])), bool(p["agrees"]))
        for p in doc["pools"])
    return IdleView(
        generated_at=float(doc["generated_at"]), stale=bool(doc["stale"]),
        age_s=None if doc["age_s"] is None else float(doc["age_s"]),
        idle_threshold_s=float(doc["idle_threshold_s"]), pools=pools,
        unmeasured=tuple(str(p) for p in doc["unmeasured"]),
        gpu_models=tuple(HeldGpus(str(g["model"]), g["total"], g["used"], g["free"],
                                  g["unhealthy"], int(g["idle"]), int(g["idle_unknown"]))
                         for g in doc["gpu_models"]))


def _parse_instance(d: Mapping[str, Any]) -> IdleInstance:
    gpus = d["gpus"]
    return IdleInstance(
        str(d["proxy_id"]), str(d["instance_id"]),
        None if d["idle_s"] is None else float(d["idle_s"]), d["alive"],
        None if gpus is None else tuple(
            InstanceGpus(str(g["model"]), int(g["healthy"]), int(g["unhealthy"])) for g in gpus))
