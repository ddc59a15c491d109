from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from harness.canned_prometheus import Series
from poolscope.bridge.app import Settings
from poolscope.scheduler_bridge.app import create_app
from tests.proxy_bridge.pool_data import CannedPool, Inst, raw_series
from tests.status.fleet import Matrix


@dataclass
class StatusBridge:
    """The Scheduler bridge with /status, over a canned Prometheus, on a real port."""

    http: TestClient[Any, Any]
    prometheus: CannedPool

    @property
    def url(self) -> str:
        return str(self.http.make_url("")).rstrip("/")


MakeBridge = Callable[..., Awaitable[StatusBridge]]


@pytest.fixture
async def make_bridge() -> AsyncIterator[MakeBridge]:
    """A bridge serving `vector`, /status included; `local` gives pools Instances
    (their raw series, and answers to the drill-down's queries), `matrix` trends."""
    started: list[tuple[CannedPool, TestClient[Any, Any]]] = []

    async def make(vector: list[Series], *, local: Mapping[str, list[Inst]] | None = None,
                   matrix: Matrix | None = None, **settings: Any) -> StatusBridge:
        local = local or {}
        raw = [s for pid, instances in local.items() for s in raw_series(pid, instances)]
        # Dated by the real clock, as a Prometheus is: the drill-down asks about the
        # snapshot's time, which the cache's TTL leaves behind now.
        prom = CannedPool(vector=[*vector, *raw], matrix=list(matrix or []), clock=time.time)
        for pid, instances in local.items():
            prom.set_local(pid, instances)
        await prom.start()
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
