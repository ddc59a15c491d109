"""End-to-end propagation: a load change at a Proxy until the Scheduler bridge shows it.

    python -m bench.propagation --samples 20 [--interval 1] \\
        [--backends single,federated,victoria] [--burst 8] [--layers] [--json]

One demo pool (a Proxy, two simulated engines, their exporters) runs without
background load. Each sample sends a burst of long requests to the Proxy, notes
when the Proxy's own /metrics first counts them in flight (the change exists at
the source), then polls the bridge's JSON until load.inflight_total shows them.
The difference is the propagation time: scrape, rule evaluation (through every
layer a backend adds), and the bridge's query. It is compared with the floor the
issue sets, one scrape interval plus one evaluation interval; the target is a p95
within 1.5x that floor. The bridge runs with --cache-ttl 0 so the number is the
backend's; a production bridge adds up to its cache TTL (default 1 s) on top.

--layers also follows the change through the backend itself (single and victoria,
which hold the raw series): the raw series and each recording rule between it and
the bridge's rollup, each by the timestamp of its first sample that shows the
burst and by when a query first returns it (`nocache=1`: VictoriaMetrics then
answers with what it holds, without -search.latencyOffset). Consecutive events
give the time spent in each layer; see docs/scaling.md for what they were.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import yaml
from prometheus_client.parser import text_string_to_metric_families

from bench.teardown import unwind_on_sigterm
from deploy.demo.cluster import Cluster, Pool
from harness.cluster import demo_cluster
from harness.prometheus import RULE_FILES
from harness.stacks import federation, scheduler_bridge, victoria_metrics
from poolscope.contract.catalog import PROXY_INSTANCE_INFLIGHT
from poolscope.contract.fields import FIELDS

BACKENDS = ("single", "federated", "victoria")
TOKENS_PER_SECOND = 50.0  # the engine simulator's default decode speed
POLL_S = 0.02
LAYERED = ("single", "victoria")  # the backends that hold the raw series
INFLIGHT_ROLLUP = next(f.rollup for f in FIELDS if f.path == "load.inflight_total")
T = TypeVar("T")


def p95(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


@dataclass
class Result:
    backend: str
    interval_s: float
    floor_s: float
    samples_s: list[float]
    stages: list[dict[str, float]]  # per sample, with --layers: layer -> seconds spent

    @property
    def p50(self) -> float:
        return statistics.median(self.samples_s)

    @property
    def p95(self) -> float:
        return p95(self.samples_s)

    def row(self) -> dict[str, float | str | int]:
        return {"backend": self.backend, "interval_s": self.interval_s,
                "floor_s": self.floor_s, "samples": len(self.samples_s),
                "p50_s": round(self.p50, 3), "p95_s": round(self.p95, 3),
                "max_s": round(max(self.samples_s), 3),
                "p95_over_floor": round(self.p95 / self.floor_s, 2)}


async def source_inflight(session: aiohttp.ClientSession, pool: Pool) -> float:
    """The Proxy's own count of requests in flight: the truth the bridge lags behind."""
    async with session.get(f"{pool.proxy_url}/metrics") as r:
        text = await r.text()
    return sum(s.value for family in text_string_to_metric_families(text)
               for s in family.samples if s.name == PROXY_INSTANCE_INFLIGHT.name)


async def bridge_inflight(session: aiohttp.ClientSession, bridge: str,
                          proxy_id: str) -> float | None:
    async with session.get(f"{bridge}/debug/proxy_pool_resources") as r:
        body = await r.json()
    pool = body["pools"].get(proxy_id)
    return None if pool is None else pool["load"]["inflight_total"]


def rule_chain(rollup: str, rule_files: Sequence[Path] = RULE_FILES) -> list[str]:
    """The recording rules a rollup reads, deepest chain first, ending with `rollup`.

    Each link is a rule whose result another rule reads: Prometheus evaluates a
    group in order, but vmalert's results are visible only after remote write, so
    on VictoriaMetrics every link is one more evaluation (and write) on the way.
    A record that reads other series of its own name (data_quality's `partial`)
    is such a link too, but not one this chain can show."""
    exprs: dict[str, list[str]] = {}
    for path in rule_files:
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                if "record" in rule:
                    exprs.setdefault(rule["record"], []).append(rule["expr"])

    def chain(name: str) -> list[str]:
        read = set(re.findall(r"[A-Za-z_:][\w:]*", " ".join(exprs[name]))) & set(exprs)
        below = [chain(n) for n in sorted(read - {name})]
        return [*max(below, key=len, default=[]), name]

    return chain(rollup)


@dataclass(frozen=True)
class Seen:
    """When a layer first showed the burst: its sample's timestamp, and when a query
    first returned that sample (both wall clock, as the backend's timestamps are)."""

    sampled: float
    returned: float


async def layer_seen(session: aiohttp.ClientSession, backend: str, metric: str,
                     proxy_id: str, burst: int, interval: float) -> Seen:
    """Poll the newest raw sample of every `metric` series of the pool until their
    sum shows the burst. A range selector returns the samples with their own
    timestamps; `nocache=1` keeps VictoriaMetrics from answering as of
    now - latencyOffset, so this is when the sample became searchable."""
    params = {"query": f'{metric}{{proxy_id="{proxy_id}"}}[{3 * interval:g}s]', "nocache": "1"}
    while True:
        async with session.get(f"{backend}/api/v1/query", params=params) as r:
            body: dict[str, Any] = await r.json()
        returned = time.time()
        newest = [series["values"][-1] for series in body["data"]["result"]]
        if newest and sum(float(v) for _, v in newest) >= burst:
            return Seen(max(float(t) for t, _ in newest), returned)
        await asyncio.sleep(POLL_S)


def stages(at_source: float, seen: dict[str, Seen | None], at_bridge: float) -> dict[str, float]:
    """Time between consecutive events: each layer's sample, then its being searchable;
    a layer never seen (a rule renamed mid-run) is left out, its time in the next."""
    events = [("source", at_source)]
    for name, s in seen.items():
        if s is not None:
            events += [(f"{name} sampled", s.sampled), (f"{name} searchable", s.returned)]
    events.append(("bridge", at_bridge))
    return {f"{a} -> {b}": tb - ta for (a, ta), (b, tb) in itertools.pairwise(events)}


async def until(probe: Callable[[], Awaitable[T]], ok: Callable[[T], bool],
                timeout: float) -> float:
    """Poll `probe` until `ok(value)`; the time it first held, by the wall clock that
    the backends' sample timestamps (--layers) are on."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ok(await probe()):
            return time.time()
        await asyncio.sleep(POLL_S)
    raise TimeoutError(f"not seen within {timeout:g}s")


@dataclass(frozen=True)
class Probe:
    """What one sample watches: the bridge and, with --layers, the backend's layers."""

    pool: Pool
    bridge: str
    backend: str
    layers: Sequence[str]  # metric names, raw series first, the bridge's rollup last
    burst: int
    interval: float


async def one_sample(session: aiohttp.ClientSession, probe: Probe, hold_s: float,
                     timeout: float) -> tuple[float, dict[str, float]]:
    pool, bridge, burst = probe.pool, probe.bridge, probe.burst
    await until(lambda: bridge_inflight(session, bridge, pool.proxy_id),
                lambda v: v == 0, timeout)
    # A random phase against the scrape and evaluation ticks, as real changes have.
    await asyncio.sleep(random.uniform(0, hold_s / 4))
    body = {"model": "demo", "max_tokens": round(hold_s * TOKENS_PER_SECOND),
            "messages": [{"role": "user", "content": "hold a batch slot"}]}
    requests = [asyncio.create_task(session.post(f"{pool.proxy_url}/v1/chat/completions",
                                                 json=body)) for _ in range(burst)]
    watchers = {name: asyncio.create_task(layer_seen(
        session, probe.backend, name, pool.proxy_id, burst, probe.interval))
        for name in probe.layers}
    try:
        at_source = await until(lambda: source_inflight(session, pool),
                                lambda v: v >= burst, timeout)
        at_bridge = await until(lambda: bridge_inflight(session, bridge, pool.proxy_id),
                                lambda v: v is not None and v >= burst, timeout)
        if watchers:
            await asyncio.wait(watchers.values(), timeout=2 * probe.interval)
    finally:
        for task in watchers.values():
            task.cancel()
        for response in await asyncio.gather(*requests, return_exceptions=True):
            if isinstance(response, aiohttp.ClientResponse):
                response.release()
    seen = {name: t.result() if t.done() and not t.cancelled() and t.exception() is None
            else None for name, t in watchers.items()}
    return at_bridge - at_source, stages(at_source, seen, at_bridge) if watchers else {}


async def measure(probe: Probe, samples: int,
                  floor: float) -> list[tuple[float, dict[str, float]]]:
    hold_s = 4 * floor  # in flight well past the slowest expected propagation
    timeout = 10 * floor + 60
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
        await until(lambda: bridge_inflight(session, probe.bridge, probe.pool.proxy_id),
                    lambda v: v is not None, 180)  # VictoriaMetrics: ~10 s per rule layer
        return [await one_sample(session, probe, hold_s, timeout) for _ in range(samples)]


@contextmanager
def backend_url(name: str, cluster: Cluster, workdir: Path,
                interval: float) -> Iterator[str]:
    if name == "single":
        yield cluster.prometheus_url
    elif name == "federated":
        with federation(workdir, {"region-a": cluster.pools}, interval) as fed:
            yield fed.global_url
    else:
        with victoria_metrics(workdir, cluster.pools, interval) as vm:
            yield vm.url


def run(backends: Sequence[str], samples: int, interval: float, burst: int,
        workdir: Path, layered: bool = False) -> list[Result]:
    floor = 2 * interval
    layers = [PROXY_INSTANCE_INFLIGHT.name, *rule_chain(INFLIGHT_ROLLUP)] if layered else []
    results = []
    cluster_cm: AbstractContextManager[Cluster] = demo_cluster(
        workdir / "demo", proxies=1, instances=2, rate=0, scrape_interval=interval)
    with cluster_cm as cluster:
        pool = cluster.pools[0]
        for name in backends:
            with backend_url(name, cluster, workdir / name, interval) as url, \
                    scheduler_bridge(workdir / name, url, name, "--cache-ttl", "0") as bridge:
                probe = Probe(pool, bridge, url, layers if name in LAYERED else [], burst,
                              interval)
                took = asyncio.run(measure(probe, samples, floor))
            results.append(Result(name, interval, floor, [t for t, _ in took],
                                  [s for _, s in took if s]))
    return results


def table(results: Sequence[Result]) -> str:
    head = "| backend | interval | floor | p50 | p95 | max | p95 / floor |"
    lines = [head, "|---|---|---|---|---|---|---|"]
    lines += [f"| {r.backend} | {r.interval_s:g} s | {r.floor_s:g} s | {r.p50:.2f} s | "
              f"{r.p95:.2f} s | {max(r.samples_s):.2f} s | {r.p95 / r.floor_s:.2f} |"
              for r in results]
    return "\n".join(lines)


def stage_table(result: Result) -> str:
    """Per layer p50 / p95 over the samples; the p50s add up to about the total's."""
    lines = [f"{result.backend}: where the time goes ({len(result.stages)} samples)",
             "| stage | p50 | p95 |", "|---|---|---|"]
    for name in result.stages[0]:
        spent = [s[name] for s in result.stages if name in s]
        lines.append(f"| {name} | {statistics.median(spent):.2f} s | {p95(spent):.2f} s |")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.propagation",
                                description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=20)
    p.add_argument("--interval", type=float, default=1.0,
                   help="scrape and evaluation interval, seconds (deploy/ uses 5)")
    p.add_argument("--backends", default="single",
                   help=f"comma-separated, of {','.join(BACKENDS)}")
    p.add_argument("--burst", type=int, default=8,
                   help="requests per load change (the demo pool takes 16 at once)")
    p.add_argument("--layers", action="store_true",
                   help=f"also time each layer inside the backend ({', '.join(LAYERED)})")
    p.add_argument("--json", action="store_true", help="one JSON object per backend")
    args = p.parse_args(argv)
    args.backends = args.backends.split(",")
    if unknown := set(args.backends) - set(BACKENDS):
        p.error(f"unknown backends: {sorted(unknown)}")
    if args.samples < 1 or args.interval <= 0 or not 1 <= args.burst <= 16:
        p.error("--samples >= 1, --interval > 0, 1 <= --burst <= 16")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="poolscope-propagation-") as tmp:
        results = run(args.backends, args.samples, args.interval, args.burst, Path(tmp),
                      args.layers)
    if args.json:
        for r in results:
            print(json.dumps({**r.row(), "samples_s": [round(s, 3) for s in r.samples_s],
                              "stages_s": [{k: round(v, 3) for k, v in s.items()}
                                           for s in r.stages]}))
    else:
        print(table(results))
        for r in results:
            if r.stages:
                print(f"\n{stage_table(r)}")
    return 0


if __name__ == "__main__":
    unwind_on_sigterm()
    sys.exit(main())
