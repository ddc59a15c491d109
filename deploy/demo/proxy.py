"""The demo Proxy: CacheRoute's request path with the Proxy exporter embedded.

    python -m deploy.demo.proxy --proxy-id proxy-a --listen 127.0.0.1:8001 \\
        [--strategy round_robin|least_inflight] [--prepare-workers N] \\
        [--prepare-capacity N] [--ready-capacity N] [--queue-timeout S] \\
        [--prepare-ms-mean MS] [--heartbeat-timeout S] [--forget-after S]

Data plane: POST /v1/chat/completions (OpenAI; `stream: true` relays SSE).
Control plane (Instances call it): POST /v1/instance/register {instance_id,
url, capacity[, admission_state]}, /heartbeat {instance_id[, admission_state]},
/deregister {instance_id}, /resource_snapshot {instance_id, snapshot}; GET
/v1/instance/list [?include_dead=true]. Also GET /metrics, GET /healthz, and GET
/v1/pool_load: the load report a Proxy attaches to its heartbeats to the Scheduler
(this demo has no Scheduler to send them to, so one asks; docs/design.md, "The load
report").

The Proxy publishes no QPS: Prometheus derives it with rate() from
poolscope_proxy_requests_total.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import signal
import sys
from collections.abc import AsyncIterator, Sequence

from aiohttp import web
from prometheus_client import CollectorRegistry

from deploy.demo.proxy_chat import ChatPath, PathConfig
from deploy.demo.proxy_control import ControlPlane
from deploy.demo.proxy_select import Strategy
from poolscope.contract.thresholds import FORGET_AFTER_S
from poolscope.exporters.common.exposition import ScrapePage, metrics_handler
from poolscope.exporters.proxy import ProxyExporter
from poolscope.exporters.proxy.clock import SYSTEM_CLOCK, Clock
from poolscope.exporters.proxy.registry import DEFAULT_HEARTBEAT_TIMEOUT
from poolscope.service.argtypes import (
    OneLineErrorParser,
    host_port,
    identifier,
    non_negative_float,
    positive_float,
    positive_int,
)

log = logging.getLogger("deploy.demo.proxy")


EXPORTER = web.AppKey("exporter", ProxyExporter)
CHAT = web.AppKey("chat", ChatPath)


def create_app(proxy_id: str, path: PathConfig | None = None,
               heartbeat_timeout: float = DEFAULT_HEARTBEAT_TIMEOUT, *,
               forget_after: float = FORGET_AFTER_S, clock: Clock = SYSTEM_CLOCK,
               rng: random.Random | None = None,
               registry: CollectorRegistry | None = None) -> web.Application:
    """The whole Proxy as an aiohttp app; its exporter is in app[EXPORTER]."""
    exporter = ProxyExporter(proxy_id, heartbeat_timeout, clock, forget_after)
    metrics = registry if registry is not None else CollectorRegistry()
    exporter.register_into(metrics)
    chat = ChatPath(exporter, path or PathConfig(), rng)
    control = ControlPlane(exporter.instances, chat.pool_changed)

    serve_metrics = metrics_handler(ScrapePage(metrics).page)

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "proxy_id": proxy_id})

    async def pool_load(_: web.Request) -> web.Response:
        return web.json_response(exporter.load_report())

    async def client_session(_: web.Application) -> AsyncIterator[None]:
        await chat.start()
        yield
        await chat.close()

    app = web.Application()
    app[EXPORTER] = exporter
    app[CHAT] = chat
    app.cleanup_ctx.append(client_session)
    app.add_routes([web.post("/v1/chat/completions", chat.handle),
                    web.get("/metrics", serve_metrics), web.get("/healthz", healthz),
                    web.get("/v1/pool_load", pool_load),
                    *control.routes()])
    return app


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    d = PathConfig()
    p = OneLineErrorParser(prog="python -m deploy.demo.proxy",
                           description=__doc__.split("\n")[0])
    p.add_argument("--proxy-id", required=True, type=identifier)
    p.add_argument("--listen", type=host_port, required=True, metavar="HOST:PORT")
    p.add_argument("--strategy", type=Strategy, choices=list(Strategy), default=d.strategy)
    p.add_argument("--prepare-workers", type=positive_int, default=d.prepare_workers)
    p.add_argument("--prepare-capacity", type=positive_int, default=d.prepare_capacity)
    p.add_argument("--ready-capacity", type=positive_int, default=d.ready_capacity)
    p.add_argument("--queue-timeout", type=positive_float, default=d.queue_timeout,
                   metavar="S", help="longest wait from acceptance to dispatch (504 after)")
    p.add_argument("--prepare-ms-mean", type=non_negative_float, default=d.prepare_ms_mean,
                   metavar="MS", help="mean simulated preparation time (lognormal)")
    p.add_argument("--heartbeat-timeout", type=positive_float,
                   default=DEFAULT_HEARTBEAT_TIMEOUT, metavar="S",
                   help="an Instance silent this long is not alive")
    p.add_argument("--forget-after", type=positive_float, default=FORGET_AFTER_S, metavar="S",
                   help="an Instance silent this long is forgotten, with its series "
                        "(default %(default)g; longer than --heartbeat-timeout)")
    args = p.parse_args(argv)
    if not args.forget_after > args.heartbeat_timeout:
        p.error(f"argument --forget-after: must be greater than --heartbeat-timeout "
                f"({args.heartbeat_timeout:g}), got {args.forget_after:g}")
    return args


async def serve(args: argparse.Namespace) -> None:
    path = PathConfig(args.strategy, args.prepare_workers, args.prepare_capacity,
                      args.ready_capacity, args.queue_timeout, args.prepare_ms_mean)
    app = create_app(args.proxy_id, path, args.heartbeat_timeout,
                     forget_after=args.forget_after)
    # A client leaving cancels its handler; on shutdown, requests still open
    # get a second, then are cancelled (a demo must stop when told); per-request
    # access lines would drown the demo's logs under load.
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1.0,
                           access_log=None)
    await runner.setup()
    host, port = args.listen
    await web.TCPSite(runner, host, port).start()
    log.info("proxy %s listening on http://%s:%d", args.proxy_id, host, port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        asyncio.run(serve(args))
    except OSError as e:
        log.error("cannot serve on %s:%d: %s", *args.listen, e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
