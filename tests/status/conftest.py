from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from poolscope.bridge.app import Settings
from poolscope.scheduler_bridge.app import create_app
from tests.scheduler_bridge.canned import CannedPrometheus, Series


@dataclass
class StatusBridge:
    """The Scheduler bridge with /status, over a canned Prometheus, on a real port."""

    http: TestClient[Any, Any]
    prometheus: CannedPrometheus

    @property
    def url(self) -> str:
        return str(self.http.make_url("")).rstrip("/")


MakeBridge = Callable[..., Awaitable[StatusBridge]]


@pytest.fixture
async def make_bridge() -> AsyncIterator[MakeBridge]:
    """A bridge serving `vector`, /status included."""
    started: list[tuple[CannedPrometheus, TestClient[Any, Any]]] = []

    async def make(vector: list[Series], **settings: Any) -> StatusBridge:
        prom = await CannedPrometheus(vector=vector).start()
        settings.setdefault("cache_ttl_s", 60.0)  # every request shares one snapshot
        app = create_app(Settings(backends=(prom.url,), **settings),
                         registry=CollectorRegistry())
        http: TestClient[Any, Any] = TestClient(TestServer(app, host="127.0.0.1"))
        await http.start_server()
        started.append((prom, http))
        return StatusBridge(http, prom)

    yield make
    for prom, http in started:
        await http.close()
        await prom.close()
