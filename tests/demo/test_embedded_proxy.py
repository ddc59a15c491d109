"""The embedding example serves the pool's real series: what a Proxy author copies works.

It runs against simulated engines on loopback and is read through its own /metrics,
as Prometheus reads it, never through the exporter object.
"""

from __future__ import annotations

import http.client
import json
import socket
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
from aiohttp.test_utils import TestServer
from prometheus_client.parser import text_string_to_metric_families

from deploy.demo import embedded_proxy
from deploy.demo.engine_sim import start
from deploy.demo.processes import ProcessGroup, port_or_free, wait_ready
from deploy.demo.sim_app import SimulatedEngine
from deploy.demo.sim_scheduler import EngineConfig
from harness.polling import eventually

POOL = "pool-e"
CAPACITY = 4
CHAT = {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}
DISPATCH = {"source": "proxy_dispatch"}
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset({"proxy_id": POOL, **labels}.items())))


@asynccontextmanager
async def engine() -> AsyncIterator[str]:
    """A simulated engine in this process, fast enough that a one-token answer is instant."""
    sim = SimulatedEngine(EngineConfig(model="m", max_running=8, max_waiting=8,
                                       tokens_per_second=1000.0, prefill_ms_per_token=0.0,
                                       kv_cache_tokens=10_000))
    runner, url = await start(sim, "127.0.0.1", 0)
    try:
        yield url
    finally:
        await runner.cleanup()


async def test_pool_series_count_what_the_proxy_did() -> None:
    # Bound, never listening, held for the whole test: each dispatch there is refused,
    # and no other test can take the port meanwhile.
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{held.getsockname()[1]}"
        await _count_what_the_proxy_did(dead)


async def _count_what_the_proxy_did(dead: str) -> None:
    async with engine() as live, aiohttp.ClientSession() as client:
        app = await embedded_proxy.create_app(POOL, {"i-1": live, "i-2": dead}, CAPACITY)
        async with TestServer(app) as server:
            statuses = []
            for _ in range(4):
                async with client.post(server.make_url("/v1/chat/completions"), json=CHAT) as r:
                    statuses.append(r.status)
            async with client.get(server.make_url("/metrics")) as r:
                m = parse(await r.text())
    assert sorted(statuses) == [200, 200, 502, 502]
    registry = {"source": "proxy_registry"}
    assert value(m, "poolscope_proxy_pool_instances_registered", **registry) == 2
    assert value(m, "poolscope_proxy_pool_instances_alive", **registry) == 2
    assert value(m, "poolscope_proxy_pool_instances_idle_unknown", **DISPATCH) == 0
    assert value(m, "poolscope_proxy_pool_inflight_requests", **DISPATCH) == 0
    assert value(m, "poolscope_proxy_pool_capacity_requests", source="configured") == 2 * CAPACITY
    assert value(m, "poolscope_proxy_requests_total", outcome="ok", **DISPATCH) == 2
    assert value(m, "poolscope_proxy_requests_total", outcome="error", **DISPATCH) == 2
    for instance_id, outcome in (("i-1", "ok"), ("i-2", "error")):
        assert value(m, "poolscope_proxy_instance_requests_total", instance_id=instance_id,
                     outcome=outcome, **DISPATCH) == 2
        assert value(m, "poolscope_proxy_instance_request_duration_seconds_count",
                     instance_id=instance_id, **DISPATCH) == 2


def test_the_command_counts_a_request_in_flight_until_its_client_leaves(
        tmp_path: Path) -> None:
    group = ProcessGroup(tmp_path)
    engine_port, proxy_port = port_or_free(0), port_or_free(0)
    try:
        sim = group.start_python("engine", "deploy.demo.engine_sim",
                                 "--listen", f"127.0.0.1:{engine_port}")
        wait_ready(f"http://127.0.0.1:{engine_port}/health", sim)
        proxy = group.start_python("proxy", "deploy.demo.embedded_proxy", POOL,
                                   f"127.0.0.1:{proxy_port}", f"i-1=http://127.0.0.1:{engine_port}")
        wait_ready(f"http://127.0.0.1:{proxy_port}/metrics", proxy)

        def scrape() -> Samples:
            with urllib.request.urlopen(f"http://127.0.0.1:{proxy_port}/metrics", timeout=5) as r:
                return parse(r.read().decode())

        def at_instance(m: Samples) -> float | None:
            return value(m, "poolscope_proxy_instance_inflight_requests", instance_id="i-1",
                         **DISPATCH)

        client = http.client.HTTPConnection("127.0.0.1", proxy_port, timeout=10)
        client.request("POST", "/v1/chat/completions", json.dumps({**CHAT, "max_tokens": 10**6}),
                       {"Content-Type": "application/json"})  # decodes for hours
        eventually(scrape, lambda m: at_instance(m) == 1, 10, "the long request in flight")
        client.close()
        m = eventually(scrape, lambda m: at_instance(m) == 0, 10, "the dispatch ended")
        assert value(m, "poolscope_proxy_requests_total", outcome="cancelled", **DISPATCH) == 1
        assert value(m, "poolscope_proxy_instance_requests_total", instance_id="i-1",
                     outcome="cancelled", **DISPATCH) == 1
    finally:
        group.stop()
