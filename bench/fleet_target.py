"""A scrape target that serves the exporters' series for a whole simulated fleet.

Measuring the recording rules at 16,000 Instances needs 16,000 Instances' worth
of series, not 16,000 processes. Every series is generated from the catalog's
Family objects (name, type, help, label names), so the fleet cannot drift from
what the real exporters publish; a family the generator cannot label fails
loudly instead of being skipped.

The target must not steal the CPU the benchmark measures: a scrape only ever
returns bytes rendered earlier. Each shard's exposition text is built once as a
%-format template with every constant value baked in, and a background tick
fills in only the values that move (counters advance, timestamps follow the
clock), one C-level format per shard, yielding to the event loop between shards
so a re-render never holds up a scrape.

Every series carries the `source` the real exporter gives it (the rules select
on it: `{source="proxy_registry"}` picks the embedded Proxy's counts over a
gateway's or the Instances' self-declared membership), and the simulated
Proxies are embedded ones: they publish the pool's counts, inflight and
capacity, consistent with their per-Instance series, and not the gateway-mode
collector health (exporters/proxy/collector.py publishes neither).

Paths: /metrics/instances/<shard> (Instance exporters, `shard_size` Instances
each) and /metrics/proxies/<proxy> (one Proxy exporter each). /targets lists
them all for a scrape config.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass

from aiohttp import web
from prometheus_client.utils import floatToGoString

from poolscope.contract import catalog
from poolscope.contract.catalog import Family
from poolscope.exporters.proxy.histogram import QUEUE_WAIT_BUCKETS, REQUEST_DURATION_BUCKETS

# Label values for every non-identity label the catalog uses. GPU labels are
# expanded together (one GPU has one uuid and one model); a family with a
# `gpu_model` but no `gpu_uuid` is a per-Instance aggregate over the GPUs of
# that model, one set per Instance (every simulated GPU is one model).
GPU_MODEL = "H100"
OTHER_LABELS: dict[str, Sequence[str]] = {
    "device": ("eth0",),
    "collector": ("host", "gpu", "engine"),  # an Instance exporter's collectors
    "reason": ("timeout",),
    "state": catalog.ADMISSION_STATES,
    "outcome": catalog.OUTCOMES,
    "queue": catalog.QUEUES,
    "health": catalog.GPU_HEALTH,
}
# The embedded Proxy exporter has one collector (exporters/proxy/collector.py).
PROXY_COLLECTORS: Sequence[str] = ("proxy",)
GPU_LABELS = frozenset(catalog.GPU_LABELS)
# Published only by the Proxy exporter's gateway mode, which reads a gateway's
# page in the background; the embedded ProxyCollector reads at scrape time and
# has neither, so the simulated (embedded) Proxies skip them.
GATEWAY_ONLY = frozenset({catalog.PROXY_COLLECTOR_SAMPLE_AGE.name,
                          catalog.PROXY_COLLECTOR_ERRORS.name,
                          catalog.PROXY_GATEWAY_SERIES_SKIPPED.name})
# Every simulated collector reads: none is switched off or has nothing to read.
NOT_ON_A_HEALTHY_FLEET = frozenset({catalog.COLLECTOR_UNAVAILABLE.name})
# Each histogram's bounds as the exporters publish them: a bucket is a series.
BUCKETS: dict[str, tuple[str, ...]] = {
    family.name: (*(floatToGoString(b) for b in bounds), "+Inf") for family, bounds in (
        (catalog.PROXY_INSTANCE_REQUEST_DURATION, REQUEST_DURATION_BUCKETS),
        (catalog.PROXY_QUEUE_WAIT, QUEUE_WAIT_BUCKETS))}

# Gauge values that make the fleet look like a healthy, moderately busy one;
# any gauge not listed reads 1.
GAUGES: dict[str, float] = {
    catalog.HOST_CPU_UTILIZATION.name: 0.4,
    catalog.HOST_CPU_COUNT.name: 64,
    catalog.HOST_MEMORY_TOTAL.name: 512e9,
    catalog.HOST_MEMORY_USED.name: 200e9,
    catalog.HOST_MEMORY_AVAILABLE.name: 312e9,
    catalog.GPU_UTILIZATION.name: 0.7,
    catalog.GPU_MEMORY_USED.name: 60e9,
    catalog.GPU_MEMORY_TOTAL.name: 80e9,
    catalog.GPU_POWER.name: 500,
    catalog.GPU_TEMPERATURE.name: 60,
    catalog.ENGINE_REQUESTS_RUNNING.name: 6,
    catalog.ENGINE_REQUESTS_WAITING.name: 2,
    catalog.ENGINE_KV_CACHE_USAGE.name: 0.5,
    catalog.ENGINE_KV_CACHE_USAGE_MAX.name: 0.5,
    catalog.ENGINE_SATURATION.name: max(2 / 5, 0.5 / 0.8),  # as the exporter scores the above
    catalog.INSTANCE_CAPACITY.name: 16,
    catalog.PROXY_INSTANCE_CAPACITY.name: 16,
    catalog.PROXY_INSTANCE_INFLIGHT.name: 7,
    catalog.PROXY_INSTANCE_IDLE.name: 2,
    catalog.PROXY_QUEUE_DEPTH.name: 3,
    catalog.PROXY_QUEUE_CAPACITY.name: 64,
    catalog.PROXY_QUEUE_OLDEST_AGE.name: 0.5,
    catalog.COLLECTOR_DURATION.name: 0.01,
    catalog.PROXY_COLLECTOR_DURATION.name: 0.001,
}
# The per-Instance GPU aggregates, consistent with the per-GPU values above:
# every simulated GPU is healthy, so a sum is `gpus` times the per-GPU value.
GPU_SUMS: dict[str, str] = {
    catalog.INSTANCE_GPU_UTILIZATION_SUM.name: catalog.GPU_UTILIZATION.name,
    catalog.INSTANCE_GPU_MEMORY_USED_SUM.name: catalog.GPU_MEMORY_USED.name,
    catalog.INSTANCE_GPU_MEMORY_TOTAL_SUM.name: catalog.GPU_MEMORY_TOTAL.name,
}
# The embedded Proxy's pool series, per member of the pool, as its collector
# derives them from the per-Instance series above: every Instance registered and
# alive (PROXY_INSTANCE_ALIVE reads 1), last dispatched to 2 s ago
# (PROXY_INSTANCE_IDLE), so none idle past IDLE_S and none of unknown idle time;
# inflight and configured capacity are the per-Instance values summed.
POOL_PER_MEMBER: dict[str, float] = {
    catalog.POOL_INSTANCES_REGISTERED.name: 1,
    catalog.POOL_INSTANCES_ALIVE.name: 1,
    catalog.POOL_INSTANCES_STALE.name: 0,
    catalog.POOL_INSTANCES_IDLE.name: 0,
    catalog.POOL_INSTANCES_IDLE_UNKNOWN.name: 0,
    catalog.POOL_INFLIGHT.name: GAUGES[catalog.PROXY_INSTANCE_INFLIGHT.name],
    catalog.POOL_CAPACITY.name: GAUGES[catalog.PROXY_INSTANCE_CAPACITY.name],
}
COUNTER_RATE = 10.0  # per second, every counter series
STATE = "accepting"
ENGINE = "vllm"

# The `source` of each family, as the real exporters label it: by the module
# that measured it (exporters/instance/*, exporters/proxy/collector.py).
SOURCES: dict[str, str] = {
    **dict.fromkeys((f.name for f in (
        catalog.INSTANCE_CAPACITY, catalog.PROXY_INSTANCE_CAPACITY, catalog.POOL_CAPACITY,
        catalog.PROXY_QUEUE_CAPACITY)), catalog.SOURCE_CONFIGURED),
    **dict.fromkeys((f.name for f in (
        catalog.INSTANCE_ADMISSION_STATE, catalog.INSTANCE_ADMISSION_LEVEL)),
        catalog.SOURCE_DERIVED),
    **dict.fromkeys((f.name for f in (
        catalog.PROXY_INSTANCE_REGISTERED, catalog.PROXY_INSTANCE_ALIVE,
        catalog.PROXY_INSTANCE_HEARTBEAT_AGE, catalog.POOL_INSTANCES_REGISTERED,
        catalog.POOL_INSTANCES_ALIVE, catalog.POOL_INSTANCES_STALE,
        catalog.PROXY_INSTANCES_FORGOTTEN)),
        catalog.SOURCE_PROXY_REGISTRY),
    **dict.fromkeys((f.name for f in (
        catalog.PROXY_INSTANCE_INFLIGHT, catalog.PROXY_INSTANCE_REQUESTS,
        catalog.PROXY_INSTANCE_REQUEST_DURATION, catalog.PROXY_INSTANCE_LAST_DISPATCH,
        catalog.PROXY_INSTANCE_IDLE, catalog.POOL_INSTANCES_IDLE,
        catalog.POOL_INSTANCES_IDLE_UNKNOWN, catalog.POOL_INFLIGHT, catalog.PROXY_REQUESTS)),
        catalog.SOURCE_PROXY_DISPATCH),
}
# Every other family's source follows from its name's prefix.
SOURCE_PREFIXES: tuple[tuple[str, str], ...] = (
    ("poolscope_host_", catalog.SOURCE_PSUTIL),
    ("poolscope_gpu_", catalog.SOURCE_NVML),
    ("poolscope_instance_gpu", catalog.SOURCE_NVML),
    ("poolscope_engine_", catalog.engine_source(ENGINE)),
    ("poolscope_collector_", catalog.SOURCE_EXPORTER),
    ("poolscope_proxy_collector_", catalog.SOURCE_EXPORTER),
    ("poolscope_proxy_queue_", catalog.SOURCE_PROXY_QUEUE),
)


@dataclass(frozen=True)
class Sample:
    """One exposition line: its text up to the value, and how the value moves."""

    prefix: str
    base: float
    slope: float  # per second since the fleet started


def _source(family: Family) -> str:
    if family.name in SOURCES:
        return SOURCES[family.name]
    for prefix, source in SOURCE_PREFIXES:
        if family.name.startswith(prefix):
            return source
    raise ValueError(f"{family.name}: the fleet has no source for it")


def _label_text(family: Family, values: dict[str, str]) -> str:
    missing = set(family.labels) - values.keys()
    if missing:
        raise ValueError(f"{family.name}: no value for labels {sorted(missing)}")
    return ",".join(f'{name}="{values[name]}"' for name in family.labels)


def _label_sets(family: Family, identity: dict[str, str], gpus: int) -> Iterator[dict[str, str]]:
    values = OTHER_LABELS
    if _is_proxy_family(family):
        values = {**OTHER_LABELS, "collector": PROXY_COLLECTORS}
    extra = [n for n in family.labels if n not in identity and n not in GPU_LABELS]
    unknown = [n for n in extra if n not in values]
    if unknown:
        raise ValueError(f"{family.name}: the fleet has no values for labels {unknown}")
    gpu_sets: list[dict[str, str]] = [{}]
    if "gpu_uuid" in family.labels:
        gpu_sets = [{"gpu": str(g), "gpu_uuid": f"GPU-{identity.get('instance_id', '')}-{g}",
                     "gpu_model": GPU_MODEL} for g in range(gpus)]
    elif "gpu_model" in family.labels:
        gpu_sets = [{"gpu_model": GPU_MODEL}] if gpus else []
    for gpu in gpu_sets:
        for combo in itertools.product(*(values[n] for n in extra)):
            yield {**identity, **gpu, **dict(zip(extra, combo, strict=True))}


def _gauge(family: Family, labels: dict[str, str], gpus: int, members: int,
           start: float) -> tuple[float, float]:
    if family.name.endswith("_timestamp_seconds"):
        return start, 1.0
    if family.name in POOL_PER_MEMBER:
        return members * POOL_PER_MEMBER[family.name], 0.0
    if family is catalog.INSTANCE_ADMISSION_STATE:
        return (1.0 if labels["state"] == STATE else 0.0), 0.0
    if family is catalog.INSTANCE_ADMISSION_LEVEL:
        return float(catalog.ADMISSION_LEVELS[STATE]), 0.0
    if family is catalog.GPU_DEVICES:
        return float(gpus), 0.0
    if family is catalog.INSTANCE_GPUS:
        return (float(gpus) if labels["health"] == "healthy" else 0.0), 0.0
    if family is catalog.INSTANCE_GPU_UTILIZATION_MAX:
        return GAUGES[catalog.GPU_UTILIZATION.name], 0.0
    if family.name in GPU_SUMS:
        return gpus * GAUGES[GPU_SUMS[family.name]], 0.0
    return GAUGES.get(family.name, 1.0), 0.0


def _samples(family: Family, identity: dict[str, str], gpus: int, members: int,
             start: float) -> Iterator[Sample]:
    """`members`: the Instances `identity` stands for (a Proxy's pool; else 1)."""
    identity = {**identity, "source": _source(family)}
    for labels in _label_sets(family, identity, gpus):
        text = _label_text(family, labels)
        if family.kind == "gauge":
            yield Sample(f"{family.name}{{{text}}} ",
                         *_gauge(family, labels, gpus, members, start))
        elif family.kind == "counter":
            yield Sample(f"{family.name}{{{text}}} ", 0.0, COUNTER_RATE)
        else:
            bounds = BUCKETS[family.name]
            for i, le in enumerate(bounds):
                share = (i + 1) / len(bounds)
                yield Sample(f'{family.name}_bucket{{{text},le="{le}"}} ', 0.0,
                             COUNTER_RATE * share)
            yield Sample(f"{family.name}_sum{{{text}}} ", 0.0, COUNTER_RATE * 0.8)
            yield Sample(f"{family.name}_count{{{text}}} ", 0.0, COUNTER_RATE)


def _header(family: Family) -> str:
    # client_python's text format names a counter's HELP/TYPE with `_total`, as here.
    return f"# HELP {family.name} {family.help}\n# TYPE {family.name} {family.kind}\n"


def _is_proxy_family(family: Family) -> bool:
    return family.name.startswith("poolscope_proxy_")


Block = tuple[Sequence[Family], Sequence[dict[str, str]], int]


class Shard:
    """One scrape target's exposition, rendered from a template on every tick.

    `blocks` pairs families with the identities (label values of proxy_id and,
    per Instance, instance_id) they are published for, and the Instances each
    identity stands for (1 for an Instance, its pool's size for a Proxy).
    """

    def __init__(self, blocks: Sequence[Block], gpus: int, start: float) -> None:
        parts: list[str] = []
        moving: list[Sample] = []
        self.series = 0
        for families, identities, members in blocks:
            for family in families:
                parts.append(_header(family).replace("%", "%%"))
                for identity in identities:
                    for sample in _samples(family, identity, gpus, members, start):
                        value = "%r" if sample.slope else repr(sample.base)
                        parts.append(sample.prefix.replace("%", "%%") + value + "\n")
                        if sample.slope:
                            moving.append(sample)
                        self.series += 1
        self._template = "".join(parts)
        self._bases = [s.base for s in moving]
        self._slopes = [s.slope for s in moving]
        self._start = start
        self.body = b""

    def render(self, now: float) -> None:
        t = now - self._start
        values = tuple(b + s * t for b, s in zip(self._bases, self._slopes, strict=True))
        self.body = (self._template % values).encode()


class Fleet:
    """Every shard of a fleet of `instances` Instances behind `proxies` Proxies."""

    def __init__(self, instances: int, proxies: int, gpus: int = 2,
                 shard_size: int = 500, start: float | None = None) -> None:
        start = time.time() if start is None else start
        families = catalog.all_families()
        instance_families = [f for f in families if not _is_proxy_family(f)
                             and f.name not in NOT_ON_A_HEALTHY_FLEET]
        per_instance_proxy = [f for f in families
                              if _is_proxy_family(f) and "instance_id" in f.labels]
        proxy_level = [f for f in families if _is_proxy_family(f)
                       and "instance_id" not in f.labels and f.name not in GATEWAY_ONLY]
        ids = [{"proxy_id": _proxy_id(i % proxies), "instance_id": f"inst-{i:06d}"}
               for i in range(instances)]
        self.instance_shards = {
            str(n): Shard([(instance_families, ids[lo:lo + shard_size], 1)], gpus, start)
            for n, lo in enumerate(range(0, instances, shard_size))}
        self.proxy_shards: dict[str, Shard] = {}
        for p in range(proxies):
            members = ids[p::proxies]
            self.proxy_shards[_proxy_id(p)] = Shard(
                [(per_instance_proxy, members, 1),
                 (proxy_level, [{"proxy_id": _proxy_id(p)}], len(members))], gpus, start)

    def shards(self) -> Iterator[Shard]:
        yield from self.instance_shards.values()
        yield from self.proxy_shards.values()

    def render(self, now: float) -> None:
        for shard in self.shards():
            shard.render(now)

    def paths(self) -> list[str]:
        return ([f"/metrics/instances/{k}" for k in self.instance_shards]
                + [f"/metrics/proxies/{k}" for k in self.proxy_shards])

    @property
    def series(self) -> int:
        return sum(s.series for s in self.shards())


def _proxy_id(index: int) -> str:
    return f"proxy-{index:04d}"


def make_app(fleet: Fleet, tick: float) -> web.Application:
    """The aiohttp app; a background task re-renders every `tick` seconds."""

    async def instances(request: web.Request) -> web.Response:
        return _serve(fleet.instance_shards.get(request.match_info["shard"]))

    async def proxies(request: web.Request) -> web.Response:
        return _serve(fleet.proxy_shards.get(request.match_info["proxy"]))

    async def targets(_: web.Request) -> web.Response:
        return web.json_response({"paths": fleet.paths(), "series": fleet.series})

    async def ticker(_: web.Application) -> AsyncIterator[None]:
        async def loop() -> None:
            while True:
                started = time.monotonic()
                now = time.time()  # one timestamp for the whole fleet's values
                for shard in fleet.shards():
                    shard.render(now)
                    await asyncio.sleep(0)  # let pending scrapes through
                await asyncio.sleep(max(0.0, tick - (time.monotonic() - started)))

        task = asyncio.create_task(loop())
        yield
        task.cancel()

    app = web.Application()
    app.router.add_get("/metrics/instances/{shard}", instances)
    app.router.add_get("/metrics/proxies/{proxy}", proxies)
    app.router.add_get("/targets", targets)
    app.cleanup_ctx.append(ticker)
    return app


def _serve(shard: Shard | None) -> web.Response:
    if shard is None:
        raise web.HTTPNotFound()
    return web.Response(body=shard.body, content_type="text/plain", charset="utf-8",
                        headers={"X-Content-Type-Options": "nosniff"})


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--proxies", type=int, default=10)
    parser.add_argument("--gpus-per-instance", type=int, default=2)
    parser.add_argument("--shard-size", type=int, default=500)
    parser.add_argument("--tick", type=float, default=15.0,
                        help="seconds between re-renders (a few scrape intervals: counters "
                        "still advance, and the target stays off the CPU it is measuring)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    fleet = Fleet(args.instances, args.proxies, args.gpus_per_instance, args.shard_size)
    fleet.render(time.time())
    print(json.dumps({"series": fleet.series, "targets": len(fleet.paths())}), flush=True)
    web.run_app(make_app(fleet, args.tick), host=args.host, port=args.port, print=None)


if __name__ == "__main__":
    main()
