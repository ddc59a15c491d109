"""docs/scheduling.md opens with a Scheduler; this runs it, as written there, against
two Proxy stand-ins (one answering, one refusing), a real ProxyExporter's load report
and a bridge address where nothing listens."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from harness.polling import until
from harness.prometheus import free_port
from poolscope.exporters.proxy import ProxyExporter
from poolscope.scheduler_bridge.client import SchedulerBridgeClient
from poolscope.scheduler_bridge.picker import Basis, PoolPicker

DOC = Path(__file__).resolve().parents[2] / "docs" / "scheduling.md"


def the_scheduler() -> dict[str, Any]:
    """The first Python block of the doc, executed: its functions by name."""
    block = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert block is not None, "docs/scheduling.md has no Python block"
    assert len(block.group(1).splitlines()) <= 32  # "a Scheduler of about twenty lines"
    namespace: dict[str, Any] = {}
    exec(compile(block.group(1), str(DOC), "exec"), namespace)
    return namespace


@pytest.fixture
async def proxies() -> AsyncIterator[dict[str, str]]:
    async def answers(_: web.Request) -> web.Response:
        return web.json_response({"choices": [{"message": {"content": "hi"}}]})

    async def refuses(_: web.Request) -> web.Response:
        return web.json_response({"error": "ready line full"}, status=503)

    runners = []
    urls = {}
    for proxy_id, handler in (("pool-a", answers), ("pool-b", refuses)):
        app = web.Application()
        app.router.add_post("/v1/chat/completions", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        runners.append(runner)
        urls[proxy_id] = f"http://127.0.0.1:{port}"
    yield urls
    for runner in runners:
        await runner.cleanup()


async def test_the_documented_scheduler_routes_counts_refusals_and_survives_no_bridge(
        proxies: dict[str, str]) -> None:
    scheduler = the_scheduler()
    picker = PoolPicker({"pool-a": 4.0, "pool-b": 4.0})
    exporter = ProxyExporter("pool-b")
    exporter.instances.register("b-1", "http://127.0.0.1:1", capacity=4)
    async with aiohttp.ClientSession() as session:
        client = SchedulerBridgeClient(f"http://127.0.0.1:{free_port()}", session,
                                       timeout_s=0.5)
        follow = asyncio.create_task(scheduler["follow_the_summary"](picker, client))
        try:
            # pool-b's Proxy reports itself empty: the report ranks it first.
            scheduler["on_heartbeat"](picker, exporter.load_report())
            status, _ = await scheduler["route"](picker, session, proxies, {"model": "m"})
            assert status == 503 and picker.stats.placed[Basis.REPORT] == 1
            assert picker.stats.refused == 1  # so the next goes elsewhere
            status, body = await scheduler["route"](picker, session, proxies, {"model": "m"})
            assert status == 200 and b"hi" in body
            assert picker.own.mine_now("pool-a") == picker.own.mine_now("pool-b") == 0
            # Nothing listens: counted, not raised.
            await until(lambda: picker.stats.bridge_errors, bool, "a bridge error counted")
            assert not follow.done()
        finally:
            follow.cancel()
    assert "Connect" in str(picker.stats.last_bridge_error)
