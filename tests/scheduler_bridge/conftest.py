from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from harness.canned_prometheus import CannedPrometheus
from poolscope.bridge.app import Settings
from poolscope.scheduler_bridge.app import create_app


class FakeClock:
    """Wall clock the test moves by hand: TTL and staleness without sleeping."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def canned() -> AsyncIterator[CannedPrometheus]:
    prom = await CannedPrometheus().start()
    yield prom
    await prom.close()


@dataclass
class Bridge:
    http: TestClient[Any, Any]
    registry: CollectorRegistry

    def metric(self, name: str, **labels: str) -> float:
        """A sample of the bridge's own /metrics registry, 0.0 when never incremented."""
        return self.registry.get_sample_value(name, labels) or 0.0


MakeBridge = Callable[..., Awaitable[Bridge]]


async def aged(bridge: Bridge, path: str, status: int = 200) -> tuple[dict[str, Any], float]:
    """An answer from the snapshot: its document, and the snapshot's age as its headers
    state it (the body keeps no age: it is rendered once per snapshot)."""
    resp = await bridge.http.get(path)
    assert resp.status == status, await resp.text()
    return await resp.json(), float(resp.headers["X-Poolscope-Age-S"])


@pytest.fixture
async def make_bridge(clock: FakeClock) -> AsyncIterator[MakeBridge]:
    """Start a bridge (fresh registry) over the given backends; closed after the test."""
    clients: list[TestClient[Any, Any]] = []

    async def make(*backends: str, **settings: Any) -> Bridge:
        settings.setdefault("cache_ttl_s", 1.0)
        settings.setdefault("stale_after_s", 30.0)
        settings.setdefault("query_timeout_s", 2.0)
        registry = CollectorRegistry()
        app = create_app(Settings(backends=backends, **settings), registry=registry,
                         clock=clock)
        client: TestClient[Any, Any] = TestClient(TestServer(app, host="127.0.0.1"))
        await client.start_server()
        clients.append(client)
        return Bridge(client, registry)

    yield make
    for client in clients:
        await client.close()


Serve = Callable[[bytes, int], Awaitable[str]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """Start a backend answering every /api/v1/query and /api/v1/query_range with
    `body` and `status`, whatever was asked."""
    servers: list[TestServer] = []

    async def start(body: bytes, status: int = 200) -> str:
        async def answer(request: web.Request) -> web.Response:
            return web.Response(body=body, status=status, content_type="application/json")

        app = web.Application()
        for path in ("/api/v1/query", "/api/v1/query_range"):
            app.router.add_get(path, answer)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        return str(server.make_url("")).rstrip("/")

    yield start
    for server in servers:
        await server.close()
