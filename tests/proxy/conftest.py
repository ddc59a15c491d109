"""Shared pieces for the Proxy exporter and demo Proxy tests."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from deploy.demo.proxy import EXPORTER, create_app
from deploy.demo.proxy_chat import PathConfig
from harness.polling import until
from poolscope.exporters.proxy import ProxyExporter

PROXY_ID = "proxy-test"
HOLD = "hold"  # a message with this content makes the fake engine wait for release()


class FakeClock:
    """Both clocks, moved by hand: liveness timeouts without sleeping."""

    def __init__(self) -> None:
        self.now_monotonic = 1000.0
        self.now_wall = 1_700_000_000.0

    def monotonic(self) -> float:
        return self.now_monotonic

    def time(self) -> float:
        return self.now_wall

    def advance(self, seconds: float) -> None:
        self.now_monotonic += seconds
        self.now_wall += seconds


async def eventually(check: Callable[[], bool], what: str, limit_s: float = 10.0) -> None:
    """Wait for another task to reach a state."""
    await until(check, bool, what, limit_s)


@dataclass
class FakeEngine:
    """An OpenAI-ish upstream whose answers the test controls."""

    status: int = 200
    stream_chunks: int = 3
    hang_after_first_chunk: bool = False
    received: int = 0
    disconnected: int = 0
    released: asyncio.Event = field(default_factory=asyncio.Event)

    def release(self) -> None:
        self.released.set()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.received += 1
        try:
            if any(m.get("content") == HOLD for m in body["messages"]):
                await self.released.wait()
            if self.status != 200:
                return web.json_response({"error": {"message": "engine failed"}},
                                         status=self.status)
            if not body.get("stream"):
                return web.json_response({"object": "chat.completion", "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": "hi"}}]})
            return await self._stream(request)
        except asyncio.CancelledError:
            self.disconnected += 1
            raise

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(self.stream_chunks):
            chunk = {"object": "chat.completion.chunk",
                     "choices": [{"index": 0, "delta": {"content": f"t{i}"}}]}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            if self.hang_after_first_chunk:
                await asyncio.Event().wait()
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


@dataclass
class Harness:
    """A demo Proxy in process, its exporter's registry, and the fake engine."""

    client: TestClient[web.Request, web.Application]
    exporter: ProxyExporter
    metrics: CollectorRegistry
    engine: FakeEngine
    engine_url: str

    def sample(self, name: str, **labels: str) -> float | None:
        labels.setdefault("proxy_id", PROXY_ID)
        return self.metrics.get_sample_value(name, labels)

    def inflight(self, instance_id: str = "i-1") -> float | None:
        return self.sample("poolscope_proxy_instance_inflight_requests",
                           instance_id=instance_id, source="proxy_dispatch")

    def outcomes(self, outcome: str) -> float | None:
        return self.sample("poolscope_proxy_requests_total", source="proxy_dispatch",
                           outcome=outcome)

    def depth(self, queue: str) -> float | None:
        return self.sample("poolscope_proxy_queue_depth", source="proxy_queue", queue=queue)

    async def register(self, instance_id: str = "i-1", capacity: int | None = None) -> None:
        resp = await self.client.post("/v1/instance/register", json={
            "instance_id": instance_id, "url": self.engine_url, "capacity": capacity})
        assert resp.status == 200, await resp.text()

    async def chat(self, content: str = "hello", stream: bool = False) -> tuple[int, str]:
        resp = await self.client.post("/v1/chat/completions", json={
            "model": "m", "stream": stream, "messages": [{"role": "user", "content": content}]})
        return resp.status, await resp.text()


MakeHarness = Callable[..., Awaitable[Harness]]


@pytest.fixture
async def make_harness() -> AsyncIterator[MakeHarness]:
    opened: list[Any] = []

    async def make(path: PathConfig | None = None, clock: Any = None,
                   heartbeat_timeout: float = 10.0) -> Harness:
        engine = FakeEngine()
        engine_app = web.Application()
        engine_app.router.add_post("/v1/chat/completions", engine.handle)
        engine_server = TestServer(engine_app)
        await engine_server.start_server()
        opened.append(engine_server)
        metrics = CollectorRegistry()
        kwargs: dict[str, Any] = {"registry": metrics}
        if clock is not None:
            kwargs["clock"] = clock
        app = create_app(PROXY_ID, path or PathConfig(prepare_ms_mean=0),
                         heartbeat_timeout, **kwargs)
        client = TestClient(TestServer(app))
        await client.start_server()
        opened.append(client)
        url = str(engine_server.make_url("")).rstrip("/")
        return Harness(client, app[EXPORTER], metrics, engine, url)

    yield make
    for thing in reversed(opened):
        await thing.close()
