"""A real stack with Instances idle past the idle threshold, without waiting for it.

Embedded Proxies (the real ProxyExporter, its registry and dispatch tracking, served on
/metrics) whose monotonic clock the test sets ahead, the seam exporters/proxy/clock.py
keeps for this: an Instance dispatched to before the clock moves is that much longer
idle. Instance exporters (the real ones, in this process) over simulated GPUs; a real
Prometheus with the project's rules; the Scheduler bridge as its own process.

Per Instance: when it was last dispatched to (None: never, so its idleness is unknown),
and its GPUs. An Instance dispatched to "now" keeps being dispatched to every second,
as traffic would, so it never turns idle however slow the machine. A pool without a
Proxy has only its Instance exporters: nothing measures its idleness.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from prometheus_client import CollectorRegistry

from deploy.demo.sim_nvml import FakeGpu, FakeNvml
from harness.prometheus import running_prometheus, scrape_config
from poolscope.exporters.common.exposition import ScrapePage, metrics_handler
from poolscope.exporters.instance.service import InstanceExporter, Settings
from poolscope.exporters.proxy import ProxyExporter
from poolscope.service.listener import HttpLimits, serving
from tests.reliability.stack import InProcessExporter, Launcher, ThreadedLoop

H100, L40S = "NVIDIA H100 80GB HBM3", "NVIDIA L40S"
GIB = 2**30
MEMORY = {H100: 80 * GIB, L40S: 48 * GIB}
BEAT_S = 1.0


@dataclass(frozen=True)
class Member:
    instance_id: str
    model: str
    gpus: int
    dispatched_ago_s: float | None  # None: never dispatched to (idle unknown); 0: busy


@dataclass(frozen=True)
class PoolSpec:
    proxy_id: str
    members: tuple[Member, ...]
    embedded: bool = True  # False: no Proxy-side exporter, only the Instance exporters


@dataclass
class JumpClock:
    """The Proxy's clocks (exporters/proxy/clock.Clock), its monotonic one `ahead_s`
    ahead of the process's."""

    ahead_s: float = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.ahead_s

    def time(self) -> float:
        return time.time()


@dataclass
class IdleFleet:
    prometheus_url: str
    scheduler_bridge_url: str
    pools: tuple[PoolSpec, ...]


class _Proxy:
    def __init__(self, spec: PoolSpec) -> None:
        self.spec = spec
        self.clock = JumpClock()  # the registry's and the tracker's
        self.exporter = ProxyExporter(spec.proxy_id, clock=self.clock)


async def _dispatch(exporter: ProxyExporter, instance_id: str) -> None:
    async with exporter.dispatch.request() as accepted, \
            exporter.dispatch.track(instance_id) as dispatch:
        accepted.outcome = dispatch.outcome = "ok"


async def _history(proxy: _Proxy) -> None:
    """Dispatch to each member as long ago as it says: the oldest first, the clock set
    ahead between them (it only moves forward), and last to where it stays."""
    dispatched = sorted((m for m in proxy.spec.members if m.dispatched_ago_s is not None),
                        key=lambda m: -(m.dispatched_ago_s or 0.0))
    ahead = max((m.dispatched_ago_s or 0.0 for m in dispatched), default=0.0)
    for m in dispatched:
        _set_ahead(proxy, ahead - (m.dispatched_ago_s or 0.0))
        await _dispatch(proxy.exporter, m.instance_id)
    _set_ahead(proxy, ahead)
    _beat(proxy)  # heartbeats on the clock as it now stands: alive, not just stale


def _set_ahead(proxy: _Proxy, ahead_s: float) -> None:
    """Move the clock forward to `ahead_s`, the members heartbeating every BEAT_S on the
    way as live ones do: silent past FORGET_AFTER_S, the registry would forget them."""
    while proxy.clock.ahead_s < ahead_s:
        proxy.clock.ahead_s = min(ahead_s, proxy.clock.ahead_s + BEAT_S)
        _beat(proxy)


def _beat(proxy: _Proxy) -> None:
    for m in proxy.spec.members:
        proxy.exporter.instances.heartbeat(m.instance_id)


async def _traffic(proxies: list[_Proxy]) -> None:
    """Heartbeats from every member and a request to each busy one, every second."""
    while True:
        for proxy in proxies:
            _beat(proxy)
            for m in proxy.spec.members:
                if m.dispatched_ago_s == 0:
                    await _dispatch(proxy.exporter, m.instance_id)
        await asyncio.sleep(BEAT_S)


async def _serve_proxy(stack: contextlib.AsyncExitStack, proxy: _Proxy,
                       targets: dict[str, str]) -> str:
    """The Proxy's /metrics on a free port, its members registered; host:port."""
    registry = CollectorRegistry()
    proxy.exporter.register_into(registry)
    app = web.Application()
    app.router.add_get("/metrics", metrics_handler(ScrapePage(registry).page))
    host, port = await stack.enter_async_context(
        serving(app, "127.0.0.1", 0, limits=HttpLimits()))
    for m in proxy.spec.members:
        proxy.exporter.instances.register(m.instance_id, f"http://{targets[m.instance_id]}",
                                          capacity=8)
    await _history(proxy)
    return f"{host}:{port}"


def _exporter(spec: PoolSpec, m: Member, loop: ThreadedLoop) -> InProcessExporter:
    busy = m.dispatched_ago_s == 0
    gpus = [FakeGpu(f"GPU-{m.instance_id}-{n}", m.model, util=60 if busy else 0,
                    used=int(MEMORY[m.model] * (0.8 if busy else 0.35)), total=MEMORY[m.model])
            for n in range(m.gpus)]
    settings = Settings(instance_id=m.instance_id, proxy_id=spec.proxy_id)
    return InProcessExporter(InstanceExporter(settings, nvml=FakeNvml(gpus).module()), loop)


@contextlib.contextmanager
def idle_fleet(workdir: Path, pools: tuple[PoolSpec, ...]) -> Iterator[IdleFleet]:
    loop = ThreadedLoop()
    launcher = Launcher(workdir)
    exporters: list[InProcessExporter] = []
    stack = contextlib.AsyncExitStack()
    proxies = [_Proxy(spec) for spec in pools if spec.embedded]
    traffic: Future[None] | None = None
    try:
        targets: dict[str, str] = {}
        for spec in pools:
            for m in spec.members:
                exporters.append(_exporter(spec, m, loop))
                targets[m.instance_id] = exporters[-1].target
        proxy_targets = [loop.run(_serve_proxy(stack, p, targets)) for p in proxies]
        traffic = asyncio.run_coroutine_threadsafe(_traffic(proxies), loop.loop)
        jobs = [scrape_config("poolscope-instance", list(targets.values())),
                scrape_config("poolscope-proxy", proxy_targets)]
        with running_prometheus(workdir / "prometheus", jobs) as prom:
            bridge = launcher.scheduler_bridge("scheduler-bridge", [prom.url])
            launcher.wait()
            yield IdleFleet(prom.url, bridge, pools)
    finally:
        if traffic is not None:
            traffic.cancel()
        launcher.stop()
        for made in exporters:
            made.close()
        loop.run(stack.aclose())
        loop.close()
