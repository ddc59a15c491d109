"""Canned raw series of one pool, shaped like what the exporters publish (names from the
catalog), plus a canned Prometheus that also answers the local expressions (the
per-Instance figures, rates and increases), which no label selector can stand for."""

from __future__ import annotations

from dataclasses import dataclass, field

from aiohttp import web

from harness.canned_prometheus import CannedPrometheus, Series, series
from poolscope.bridge.local_queries import (
    FRESHNESS_RULE,
    SEEN_RULE,
    LocalQueries,
)
from poolscope.contract import catalog as c

GiB = 2.0**30
PER_INSTANCE = (FRESHNESS_RULE, SEEN_RULE)


@dataclass
class Inst:
    """One Instance as the Proxy and its Instance exporter would report it."""

    id: str
    alive: bool = True
    exporter_up: bool = True  # False: it answered within the member memory, not now
    idle_s: float | None = 12.0  # None: never dispatched
    gpus: int | None = 1  # None: NVML fails (GPUs asked for, or a driver NVML refuses)
    unhealthy_gpus: int = 0  # the last ones of `gpus`: a read failed, so no usage series
    gpu_model: str = "H100"
    no_driver: str | None = None  # an UnavailableReason: no NVIDIA driver, not failing
    engine: str | None = "vllm"  # None: no engine collector; "down": unreachable
    proxy_capacity: float | None = 8.0
    learned_capacity: float | None = None
    admission: str = "accepting"  # the Instance exporter's admission state
    cpu: float = 0.42
    sample_age_s: float = 1.0  # the host sample's age when scraped
    recent_errors: dict[tuple[str, str], float] = field(default_factory=dict)


def raw_series(pid: str, instances: list[Inst], proxy_up: bool = True,
               queue_capacity: float | None = 64.0) -> list[Series]:
    out: list[Series] = []
    if not proxy_up:
        return [*out, *(s for i in instances for s in _exporter(pid, i)),
                series("up", pid, "0", None, job="poolscope-proxy", instance="127.0.0.1:9")]
    out.append(series("up", pid, "1", None, job="poolscope-proxy", instance="127.0.0.1:9"))
    out.append(series(c.PROXY_COLLECTOR_SUCCESS.name, pid, "1", "exporter", collector="proxy"))
    for q, depth in (("prepare", "3"), ("ready", "0")):
        out.append(series(c.PROXY_QUEUE_DEPTH.name, pid, depth, "proxy_queue", queue=q))
        if queue_capacity is not None:
            out.append(series(c.PROXY_QUEUE_CAPACITY.name, pid, f"{queue_capacity:g}",
                              "configured", queue=q))
    out.append(series(c.PROXY_QUEUE_OLDEST_AGE.name, pid, "0.75", "proxy_queue",
                      queue="prepare"))
    for i in instances:
        reg = {"instance_id": i.id}
        out += [series(c.PROXY_INSTANCE_REGISTERED.name, pid, "1", "proxy_registry", **reg),
                series(c.PROXY_INSTANCE_ALIVE.name, pid, "1" if i.alive else "0",
                       "proxy_registry", **reg),
                series(c.PROXY_INSTANCE_HEARTBEAT_AGE.name, pid, "1.5", "proxy_registry", **reg),
                series(c.PROXY_INSTANCE_INFLIGHT.name, pid, "2", "proxy_dispatch", **reg)]
        if i.proxy_capacity is not None:
            out.append(series(c.PROXY_INSTANCE_CAPACITY.name, pid, f"{i.proxy_capacity:g}",
                              "configured", **reg))
        if i.idle_s is not None:
            out += [series(c.PROXY_INSTANCE_IDLE.name, pid, f"{i.idle_s:g}", "proxy_dispatch",
                           **reg),
                    series(c.PROXY_INSTANCE_LAST_DISPATCH.name, pid, "1699999988",
                           "proxy_dispatch", **reg)]
        out += _exporter(pid, i)
    return out


def _exporter(pid: str, i: Inst) -> list[Series]:
    if not i.exporter_up:
        return [series("up", pid, "0", None, job="poolscope-instance",
                       instance=f"{i.id}:9100"),
                series(SEEN_RULE, pid, "1", None, instance_id=i.id)]
    ids = {"instance_id": i.id}
    out = [series("up", pid, "1", None, job="poolscope-instance", instance=f"{i.id}:9100"),
           series(c.HOST_CPU_UTILIZATION.name, pid, f"{i.cpu:g}", "psutil", **ids),
           series(c.HOST_MEMORY_USED.name, pid, str(16 * GiB), "psutil", **ids),
           series(c.HOST_MEMORY_TOTAL.name, pid, str(64 * GiB), "psutil", **ids),
           series(FRESHNESS_RULE, pid, "1.25", None, **ids),
           # 10 and 2 Mbit/s
           series(c.HOST_NETWORK_RECEIVE_RATE.name, pid, "1250000", "psutil", **ids),
           series(c.HOST_NETWORK_TRANSMIT_RATE.name, pid, "250000", "psutil", **ids),
           series(SEEN_RULE, pid, "1", None, **ids),
           series(c.COLLECTOR_SAMPLE_AGE.name, pid, f"{i.sample_age_s:g}", "exporter",
                  collector="host", **ids),
           series(c.COLLECTOR_SUCCESS.name, pid, "1", "exporter", collector="host", **ids)]
    for state in c.ADMISSION_STATES:
        out.append(series(c.INSTANCE_ADMISSION_STATE.name, pid,
                          "1" if state == i.admission else "0", "derived", state=state, **ids))
    if i.learned_capacity is not None:
        out.append(series(c.INSTANCE_CAPACITY.name, pid, f"{i.learned_capacity:g}", "learned",
                          **ids))
    out += _gpus(pid, i)
    out += _engine(pid, i)
    return out


def _gpus(pid: str, i: Inst) -> list[Series]:
    ids = {"instance_id": i.id}
    if i.no_driver is not None:  # the collector's one series: no health, no GPU series
        return [series(c.COLLECTOR_UNAVAILABLE.name, pid, "1", "exporter", collector="gpu",
                       reason=i.no_driver, **ids)]
    if i.gpus is None:
        return [series(c.COLLECTOR_SUCCESS.name, pid, "0", "exporter", collector="gpu", **ids),
                series(c.COLLECTOR_ERRORS.name, pid, "40", "exporter", collector="gpu",
                       reason="nvml_unavailable", **ids),
                series(c.COLLECTOR_ERRORS.name, pid, "0", "exporter", collector="gpu",
                       reason="nvml_read", **ids)]
    out = [series(c.COLLECTOR_SUCCESS.name, pid, "1", "exporter", collector="gpu", **ids),
           series(c.GPU_DEVICES.name, pid, str(i.gpus), "nvml", **ids)]
    if i.gpus:  # the per-model counts, both healthy and unhealthy, for a model present
        sick = {"healthy": i.gpus - i.unhealthy_gpus, "unhealthy": i.unhealthy_gpus}
        out += [series(c.INSTANCE_GPUS.name, pid, str(n), "nvml", gpu_model=i.gpu_model,
                       health=health, **ids) for health, n in sick.items()]
    for g in range(i.gpus):
        gl = {"gpu": str(g), "gpu_uuid": f"GPU-{i.id}-{g}", "gpu_model": i.gpu_model, **ids}
        if g >= i.gpus - i.unhealthy_gpus:
            out.append(series(c.GPU_HEALTHY.name, pid, "0", "nvml", **gl))
            continue
        out += [series(c.GPU_HEALTHY.name, pid, "1", "nvml", **gl),
                series(c.GPU_UTILIZATION.name, pid, "0.9", "nvml", **gl),
                series(c.GPU_MEMORY_USED.name, pid, str(20 * GiB), "nvml", **gl),
                series(c.GPU_MEMORY_TOTAL.name, pid, str(80 * GiB), "nvml", **gl)]
    return out


def _engine(pid: str, i: Inst) -> list[Series]:
    ids = {"instance_id": i.id}
    if i.engine is None:
        return []
    if i.engine == "down":
        return [series(c.COLLECTOR_SUCCESS.name, pid, "0", "exporter", collector="engine",
                       **ids),
                series(c.COLLECTOR_ERRORS.name, pid, "3", "exporter", collector="engine",
                       reason="timeout", **ids),
                series(c.COLLECTOR_ERRORS.name, pid, "50", "exporter", collector="engine",
                       reason="connection", **ids)]
    source = c.engine_source(i.engine)
    out = [series(c.COLLECTOR_SUCCESS.name, pid, "1", "exporter", collector="engine", **ids),
           series(c.ENGINE_REQUESTS_RUNNING.name, pid, "2", source, **ids),
           series(c.ENGINE_REQUESTS_WAITING.name, pid, "1", source, **ids)]
    if i.engine != "tgi":
        out += [series(c.ENGINE_KV_CACHE_USAGE.name, pid, "0.5", source, **ids),
                series(c.ENGINE_KV_CACHE_USAGE_MAX.name, pid, "0.5", source, **ids)]
    return out


def recent_errors(pid: str, instances: list[Inst]) -> list[Series]:
    """What `increase(poolscope_collector_errors_total[1m]) > 0` returns (no __name__)."""
    out = []
    for i in instances:
        for (collector, reason), value in i.recent_errors.items():
            metric, v = series("", pid, f"{value:g}", "exporter", instance_id=i.id,
                               collector=collector, reason=reason)
            del metric["__name__"]
            out.append((metric, v))
    return out


def queue_wait(pid: str, prepare: str = "0.2", ready: str = "NaN") -> list[Series]:
    """The queues' mean wait over 1m; NaN is what 0 / 0 gives with no traffic."""
    return [({"proxy_id": pid, "source": "proxy_queue", "queue": "prepare"}, prepare),
            ({"proxy_id": pid, "source": "proxy_queue", "queue": "ready"}, ready)]


@dataclass
class CannedPool(CannedPrometheus):
    """Selectors answered from `vector`; the local expressions from `answers`."""

    answers: dict[str, list[Series]] = field(default_factory=dict)
    per_instance: dict[str, str] = field(default_factory=dict)  # query -> proxy_id

    def set_local(self, pid: str, instances: list[Inst], wait: list[Series] | None = None,
                  ) -> LocalQueries:
        queries = LocalQueries.for_pool(pid)
        self.answers[queries.queue_wait] = queue_wait(pid) if wait is None else wait
        self.answers[queries.recent_errors] = recent_errors(pid, instances)
        self.per_instance[queries.per_instance] = pid
        return queries

    async def _query(self, request: web.Request) -> web.Response:
        promql = request.query.get("query", "")
        answer = self.answers.get(promql)
        if promql in self.per_instance:  # the figures computed per Instance, from `vector`
            answer = [(m, v) for m, v in self.vector if m["__name__"] in PER_INSTANCE
                      and m.get("proxy_id") == self.per_instance[promql]]
        if answer is None or self.fail_status is not None or (
                self.fail_matching is not None and self.fail_matching in promql):
            return await super()._query(request)
        at = request.query.get("time", "")
        self.queries.append((promql, at))
        return self.answer(at, [{"metric": m, "value": [float(at), v]} for m, v in answer])
