"""Every Poolscope service's /metrics page, served in-process and filled the way
production fills it, for the tests that check the pages against strict parsers.

Each page is built from what really feeds it: the Instance exporter reads a captured
vLLM page and three fake GPUs, the gateway adapter a captured llmgw page, and the
bridges a canned Prometheus after answering a few requests (so their histograms and
counters hold samples, as a serving bridge's do).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from harness.canned_prometheus import CannedPrometheus, pool_series
from harness.fake_gpus import three_gpus
from harness.static_http import serving, serving_fixture
from poolscope.bridge.app import Settings
from poolscope.exporters.common.exposition import ScrapePage, metrics_handler
from poolscope.exporters.instance import server as instance_server
from poolscope.exporters.instance.service import InstanceExporter
from poolscope.exporters.instance.service import Settings as InstanceSettings
from poolscope.exporters.proxy import ProxyExporter
from poolscope.exporters.proxy import __main__ as gateway_main
from poolscope.exporters.proxy.gateway import GatewayExporter, GatewayReader
from poolscope.exporters.proxy.gateways import GATEWAYS
from poolscope.exporters.proxy.gateways.pool import Pools
from poolscope.proxy_bridge.app import create_app as proxy_bridge_app
from poolscope.scheduler_bridge.app import create_app as scheduler_bridge_app
from poolscope.service.web import Exposure
from tests.proxy_bridge.pool_data import CannedPool
from tests.scheduler_bridge.conftest import FakeClock

Client = TestClient[Any, Any]
GATEWAY_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gateways"
POOL = "pool-1"
SERVICES = ("instance_exporter", "proxy_exporter_gateway", "scheduler_bridge", "proxy_bridge")
# ... and the page a Proxy embedding the Proxy exporter serves (its process is the
# Proxy's, so it carries no process series of Poolscope's).
PAGES = (*SERVICES, "proxy_exporter_embedded")
# Pages whose own series are measurements and so must each name a `source`.
EXPORTERS = ("instance_exporter", "proxy_exporter_gateway")
OPENMETRICS_ACCEPT = "application/openmetrics-text;version=1.0.0"


async def _client(stack: AsyncExitStack, app: Any) -> Client:
    client: Client = TestClient(TestServer(app, host="127.0.0.1"))
    await client.start_server()
    stack.push_async_callback(client.close)
    return client


async def _instance_exporter(stack: AsyncExitStack, path: str) -> Client:
    engine_url = stack.enter_context(serving_fixture("vllm"))
    exporter = InstanceExporter(
        InstanceSettings(instance_id="inst-1", proxy_id=POOL, engine_metrics_url=engine_url),
        nvml=three_gpus().module())
    stack.push_async_callback(exporter.stop)
    await exporter.loop.sample_all()
    return await _client(stack, instance_server.make_app(exporter, Exposure(telemetry_path=path)))


async def _gateway(stack: AsyncExitStack, path: str) -> Client:
    url = stack.enter_context(serving((GATEWAY_FIXTURES / "llmgw.txt").read_bytes()))
    exporter = GatewayExporter(GatewayReader(GATEWAYS["llmgw"], url, Pools(label="pool"), 2.0),
                               1.0)
    stack.push_async_callback(exporter.stop)
    await exporter.loop.sample_all()
    return await _client(stack, gateway_main.make_app(exporter, Exposure(telemetry_path=path)))


async def _scheduler_bridge(stack: AsyncExitStack, path: str) -> Client:
    prom = await CannedPrometheus(vector=pool_series(POOL)).start()
    stack.push_async_callback(prom.close)
    app = scheduler_bridge_app(Settings(backends=(prom.url,)), registry=CollectorRegistry(),
                               clock=FakeClock())
    client = await _client(stack, app)
    for route in ("/debug/proxy_pool_resources", f"/v1/pool_resources/{POOL}",
                  "/v1/pool_resources/nowhere"):
        await (await client.get(route)).read()
    return client


async def _proxy_bridge(stack: AsyncExitStack, path: str) -> Client:
    prom = await CannedPool(vector=pool_series(POOL)).start()
    stack.push_async_callback(prom.close)
    prom.set_local(POOL, [])
    app = proxy_bridge_app(POOL, Settings(backends=(prom.url,)), registry=CollectorRegistry(),
                           clock=FakeClock())
    client = await _client(stack, app)
    for route in ("/debug/pool_resource", "/debug/pool_resource?detail=local"):
        await (await client.get(route)).read()
    return client


async def _embedded(stack: AsyncExitStack, path: str) -> Client:
    exporter = ProxyExporter(POOL)
    queue = exporter.add_queue("prepare", depth=lambda: 1, capacity=8)
    exporter.instances.register("inst-1", "http://127.0.0.1:9", capacity=4)
    exporter.instances.register("inst-2", "http://127.0.0.1:9")
    async with exporter.dispatch.request() as accepted:
        queue.leave(queue.enter())
        async with exporter.dispatch.track("inst-1") as dispatch:
            accepted.outcome = dispatch.outcome = "ok"
    registry = CollectorRegistry()
    exporter.register_into(registry)
    app = web.Application()
    app.router.add_get(path, metrics_handler(ScrapePage(registry).page))
    return await _client(stack, app)


_BUILDERS: dict[str, Callable[[AsyncExitStack, str], Any]] = {
    "instance_exporter": _instance_exporter, "proxy_exporter_gateway": _gateway,
    "scheduler_bridge": _scheduler_bridge, "proxy_bridge": _proxy_bridge,
    "proxy_exporter_embedded": _embedded}


@asynccontextmanager
async def serving_page(service: str, telemetry_path: str = "/metrics"
                       ) -> AsyncIterator[Client]:
    """A client of `service` (one of PAGES), its page filled; the bridges take no
    telemetry path of their own yet (their app factories do), so only the default."""
    async with AsyncExitStack() as stack:
        yield await _BUILDERS[service](stack, telemetry_path)


async def fetch(client: Client, accept: str | None = None, path: str = "/metrics"
                ) -> tuple[str, str, str]:
    """(Content-Type, Vary, body) of one scrape, `Accept: accept` when given."""
    resp = await client.get(path, headers={"Accept": accept} if accept else {})
    body = await resp.text()
    assert resp.status == 200, body
    return resp.headers["Content-Type"], resp.headers.get("Vary", ""), body
