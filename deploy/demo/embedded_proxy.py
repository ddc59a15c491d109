"""The smallest asyncio Proxy that embeds the Proxy exporter: a Proxy author's example.

    python -m deploy.demo.embedded_proxy pool-a 127.0.0.1:8100 \\
        i-1=http://127.0.0.1:8001 i-2=http://127.0.0.1:8002 [--capacity 8]

Each POST /v1/chat/completions goes to the next alive Instance; GET /metrics serves
the pool's series to Prometheus (job poolscope-proxy). A Proxy with queues also
hands each one's depth to `exporter.add_queue`, as deploy/demo/proxy_lines.py does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry

from deploy.demo.proxy_forward import error_response, outcome_for_status
from poolscope.exporters.common.exposition import ScrapePage, metrics_handler
from poolscope.exporters.proxy import ProxyExporter


async def create_app(proxy_id: str, instances: dict[str, str],
                     capacity: int | None = None) -> web.Application:
    exporter = ProxyExporter(proxy_id)
    metrics = CollectorRegistry()
    exporter.register_into(metrics)
    for instance_id, url in instances.items():
        exporter.instances.register(instance_id, url, capacity)
    session, turns = aiohttp.ClientSession(), itertools.count()

    async def chat(request: web.Request) -> web.Response:
        body = await request.read()
        async with exporter.dispatch.request() as accepted:
            alive = exporter.instances.alive()
            if not alive:
                accepted.outcome = "rejected"
                return error_response(503, "no alive Instance", "no_instance")
            instance = alive[next(turns) % len(alive)]
            try:
                async with exporter.dispatch.track(instance.instance_id) as dispatch, \
                        session.post(f"{instance.url}/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"}) as upstream:
                    accepted.outcome = dispatch.outcome = outcome_for_status(upstream.status)
                    return web.Response(status=upstream.status, body=await upstream.read(),
                                        content_type=upstream.content_type)
            except aiohttp.ClientError as e:  # the dispatch counted it as an error on leaving
                accepted.outcome = "error"
                return error_response(502, f"the Instance failed: {e}", "upstream_error")

    async def check_health() -> None:
        """An answered health check is the Instance's heartbeat: alive means it answered.
        One the registry forgot (silent past its bound) is registered again when it answers."""
        while True:
            for instance_id, url in instances.items():
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with session.get(f"{url}/health", timeout=aiohttp.ClientTimeout(1)) as r:
                        if r.status == 200 and not exporter.instances.heartbeat(instance_id):
                            exporter.instances.register(instance_id, url, capacity)
            await asyncio.sleep(2.0)  # well inside the registry's 10 s heartbeat timeout

    # Served on the event loop, so a scrape never reads a half-updated dispatch; in
    # the format the scraper asks for (OpenMetrics or the text format).
    serve_metrics = metrics_handler(ScrapePage(metrics).page)

    async def on_cleanup(_: web.Application) -> None:
        checks.cancel()
        await session.close()

    checks = asyncio.create_task(check_health())
    app = web.Application()
    app.on_cleanup.append(on_cleanup)
    app.add_routes([web.post("/v1/chat/completions", chat), web.get("/metrics", serve_metrics)])
    return app


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("proxy_id")
    p.add_argument("listen", metavar="HOST:PORT")
    p.add_argument("instances", nargs="+", metavar="ID=URL")
    p.add_argument("--capacity", type=int, help="each Instance's concurrent requests")
    args = p.parse_args()
    host, _, port = args.listen.rpartition(":")
    instances = dict(spec.split("=", 1) for spec in args.instances)
    # A client that leaves cancels its handler: its dispatch ends, counted as cancelled.
    web.run_app(create_app(args.proxy_id, instances, args.capacity), host=host, port=int(port),
                handler_cancellation=True)


if __name__ == "__main__":
    main()
