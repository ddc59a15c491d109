"""A real Prometheus scrapes the demo Proxy (run as `python -m`) while requests flow."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from harness.prometheus import (
    REPO,
    free_port,
    running_prometheus,
    scrape_config,
    stop_group,
    wait_http,
)
from tests.proxy.conftest import FakeEngine

pytestmark = pytest.mark.integration


@pytest.fixture
async def engine_url() -> AsyncIterator[str]:
    engine = FakeEngine()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", engine.handle)
    server = TestServer(app)
    await server.start_server()
    yield str(server.make_url("")).rstrip("/")
    await server.close()


@pytest.fixture
async def proxy_url(tmp_path: Path) -> AsyncIterator[str]:
    port = free_port()
    log = (tmp_path / "proxy.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "deploy.demo.proxy", "--proxy-id", "pool-a",
         "--listen", f"127.0.0.1:{port}", "--prepare-ms-mean", "5",
         # The Instance registers once and never beats: it must stay alive for as
         # long as Prometheus takes to start and scrape twice on a busy machine.
         "--heartbeat-timeout", "600", "--forget-after", "1200"],
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        await asyncio.to_thread(wait_http, f"{url}/healthz")
        yield url
    finally:
        stop_group(proc)
        log.close()
    assert proc.returncode == 0, (tmp_path / "proxy.log").read_text()


async def test_prometheus_sees_the_request_rate_move(
        tmp_path: Path, engine_url: str, proxy_url: str) -> None:
    async with aiohttp.ClientSession() as http:
        registered = await http.post(f"{proxy_url}/v1/instance/register", json={
            "instance_id": "i-1", "url": engine_url, "capacity": 4})
        assert registered.status == 200
        chat = {"stream": True, "messages": [{"role": "user", "content": "hi"}]}
        stop = asyncio.Event()

        async def load() -> int:
            sent = 0
            while not stop.is_set():
                async with http.post(f"{proxy_url}/v1/chat/completions", json=chat) as r:
                    assert r.status == 200
                    await r.read()
                sent += 1
                await asyncio.sleep(0.02)
            return sent

        target = proxy_url.removeprefix("http://")
        with running_prometheus(tmp_path / "prom", [scrape_config("proxy", [target])],
                                rule_files=()) as prom:
            sender = asyncio.create_task(load())
            rate = await asyncio.to_thread(
                prom.wait_for,
                'rate(poolscope_proxy_requests_total{proxy_id="pool-a",outcome="ok"}[5s]) > 0')
            alive = await asyncio.to_thread(
                prom.wait_for, 'poolscope_proxy_instance_alive{instance_id="i-1"} == 1')
            stop.set()
            sent = await sender

    assert rate[0]["metric"]["source"] == "proxy_dispatch"
    assert alive[0]["metric"]["proxy_id"] == "pool-a"
    assert sent > 0
