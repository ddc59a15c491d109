from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from harness.fake_gpus import FakeNvml, three_gpus
from poolscope.exporters.instance.gpu import GpuReader
from poolscope.exporters.instance.service import InstanceExporter, Settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "engines"


def fixture_text(name: str) -> str:
    return (FIXTURES / f"{name}.txt").read_text()


@dataclass
class EngineServer:
    """A local engine /metrics endpoint whose answer each test scripts."""

    url: str = ""
    body: str = ""
    status: int = 200
    hang: bool = False
    requests: int = 0
    # llama.cpp's /props beside /metrics: None answers 404, as other engines do.
    props: str | None = None
    props_hang: bool = False
    props_requests: int = 0
    _release: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.Response:
        self.requests += 1
        if self.hang:
            await self._release.wait()
        return web.Response(text=self.body, status=self.status,
                            content_type="text/plain", charset="utf-8")

    async def handle_props(self, _: web.Request) -> web.Response:
        self.props_requests += 1
        if self.props_hang:
            await self._release.wait()
        if self.props is None:
            return web.Response(status=404)
        return web.Response(text=self.props, content_type="application/json")


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    """`app` on a free loopback port: its runner (to clean up) and base URL."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


@pytest.fixture
async def engine_server() -> AsyncIterator[EngineServer]:
    server = EngineServer()
    app = web.Application()
    app.router.add_get("/metrics", server.handle)
    app.router.add_get("/props", server.handle_props)
    runner, base = await serve(app)
    server.url = f"{base}/metrics"
    yield server
    server._release.set()
    await runner.cleanup()


MakeExporter = Callable[..., tuple[InstanceExporter, CollectorRegistry]]


@pytest.fixture
async def make_exporter() -> AsyncIterator[MakeExporter]:
    """An exporter with a fresh registry; NVML is the fake unless told otherwise
    (`gpu`: a reader of one's own, e.g. on a scripted clock)."""
    made: list[InstanceExporter] = []

    def make(nvml: FakeNvml | None = None, gpu: GpuReader | None = None, **settings: object
             ) -> tuple[InstanceExporter, CollectorRegistry]:
        base: dict[str, object] = {"instance_id": "inst-1", "proxy_id": "proxy-a"}
        exporter = InstanceExporter(Settings(**{**base, **settings}),  # type: ignore[arg-type]
                                    nvml=(nvml or three_gpus()).module(), gpu=gpu)
        made.append(exporter)
        return exporter, exporter.registry()

    yield make
    for exporter in made:
        await exporter.stop()


IDS = {"instance_id": "inst-1", "proxy_id": "proxy-a"}


def labels(source: str, **extra: str) -> dict[str, str]:
    return {**IDS, "source": source, **extra}


def health(collector: str, **extra: str) -> dict[str, str]:
    return labels("exporter", collector=collector, **extra)


def names(registry: CollectorRegistry) -> set[str]:
    return {s.name for m in registry.collect() for s in m.samples}
