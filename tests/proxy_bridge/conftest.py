from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from aiohttp.web import Application
from prometheus_client import CollectorRegistry

from poolscope.bridge.app import Settings
from poolscope.proxy_bridge.app import create_app
from tests.proxy_bridge.pool_data import CannedPool
from tests.scheduler_bridge.conftest import FakeClock

PID = "hp_127.0.0.1:8001"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def canned() -> AsyncIterator[CannedPool]:
    prom = await CannedPool().start()
    yield prom
    await prom.close()


@dataclass
class Client:
    http: TestClient[Any, Any]
    registry: CollectorRegistry

    async def get(self, path: str, status: int = 200) -> Any:
        resp = await self.http.get(path)
        assert resp.status == status, await resp.text()
        assert resp.content_type == "application/json"
        return await resp.json()

    async def body(self, path: str) -> bytes:
        resp = await self.http.get(path)
        assert resp.status == 200, await resp.text()
        return await resp.read()


Serve = Callable[..., Awaitable[Client]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """Serve any bridge app on a free loopback port; closed after the test."""
    clients: list[TestClient[Any, Any]] = []

    async def start(app: Application, registry: CollectorRegistry | None = None) -> Client:
        client: TestClient[Any, Any] = TestClient(TestServer(app, host="127.0.0.1"))
        await client.start_server()
        clients.append(client)
        return Client(client, registry or CollectorRegistry())

    yield start
    for client in clients:
        await client.close()


MakeBridge = Callable[..., Awaitable[Client]]


@pytest.fixture
def make_bridge(serve: Serve, clock: FakeClock) -> MakeBridge:
    """A Proxy bridge for `proxy_id` (fresh registry) over the given backends."""

    async def make(*backends: str, proxy_id: str = PID, **settings: Any) -> Client:
        settings.setdefault("cache_ttl_s", 1.0)
        settings.setdefault("stale_after_s", 30.0)
        settings.setdefault("query_timeout_s", 2.0)
        registry = CollectorRegistry()
        app = create_app(proxy_id, Settings(backends=backends, **settings),
                         registry=registry, clock=clock)
        return await serve(app, registry)

    return make
