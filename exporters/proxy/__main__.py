"""`python -m exporters.proxy` / `poolscope-proxy-exporter`: the Proxy exporter's
gateway mode, for a Proxy that is not ours (a Python Proxy embeds `ProxyExporter`).

    poolscope-proxy-exporter --gateway llmgw --gateway-metrics-url http://router:9090/metrics \\
        --pool-label pool

Exit codes: 0 after SIGTERM/SIGINT, 2 for invalid flags, 1 when the listen address
cannot be bound.
"""

from __future__ import annotations

import argparse
import math
import sys
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from exporters.common.web import (
    ServiceConfig,
    UsageError,
    add_common_flags,
    guarded,
    refuse,
    run,
    serve_until_stopped,
    service_config,
)
from exporters.proxy.gateway import GatewayExporter, GatewayReader
from exporters.proxy.gateways import GATEWAYS
from exporters.proxy.gateways.pool import Pools

PROG = "poolscope-proxy-exporter"
DEFAULT_LISTEN = "127.0.0.1:9202"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


@dataclass(frozen=True)
class Config:
    reader: GatewayReader
    interval: float
    service: ServiceConfig


def _seconds(flag: str, value: float) -> float:
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"{flag}: must be a positive number of seconds, got {value}")
    return value


def _url(value: str) -> str:
    parsed = urllib.parse.urlsplit(value)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise UsageError(f"--gateway-metrics-url: expected an http(s) URL, got {value!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Poolscope Proxy exporter, gateway mode: a gateway's "
                "own /metrics published as Poolscope's Proxy-side series.")
    p.add_argument("--gateway", required=True, choices=sorted(GATEWAYS),
                   help="which gateway's page to read")
    p.add_argument("--gateway-metrics-url", required=True,
                   help="the gateway's /metrics URL (llmgw: its admin listener)")
    pools = p.add_mutually_exclusive_group(required=True)
    pools.add_argument("--proxy-id", help="every series of the page is this one pool's")
    pools.add_argument("--pool-label", nargs="?", const="",
                       help="the gateway label whose value is the pool's proxy_id "
                            "(default: llmgw `pool`, gie `name`)")
    p.add_argument("--sample-interval", type=float, default=1.0,
                   help="seconds between reads of the gateway page (default 1)")
    p.add_argument("--gateway-timeout", type=float, default=2.0,
                   help="seconds one read may take (default 2)")
    add_common_flags(p, default_listen=DEFAULT_LISTEN, default_log_level="INFO")
    return p


def parse(argv: Sequence[str] | None = None) -> Config:
    args = build_parser().parse_args(argv)
    gateway = GATEWAYS[args.gateway]
    if args.proxy_id is not None and not args.proxy_id.strip():
        raise UsageError("--proxy-id: must not be empty")
    pools = (Pools(proxy_id=args.proxy_id) if args.proxy_id is not None
             else Pools(label=args.pool_label or gateway.pool_label))
    interval = _seconds("--sample-interval", args.sample_interval)
    timeout = _seconds("--gateway-timeout", args.gateway_timeout)
    reader = GatewayReader(gateway, _url(args.gateway_metrics_url), pools, timeout)
    return Config(reader, interval, service_config(args))


def make_app(exporter: GatewayExporter, auth_token: str | None = None) -> web.Application:
    registry = exporter.registry()

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "gateway": exporter.reader.gateway.name})

    app = web.Application(middlewares=guarded(auth_token))
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    return app


async def serve(config: Config) -> None:
    exporter = GatewayExporter(config.reader, config.interval)
    try:
        await serve_until_stopped(make_app(exporter, config.service.auth_token),
                                  config.service, prog=PROG, started=exporter.start)
    finally:
        await exporter.stop()


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = parse(argv)
    except UsageError as e:
        return refuse(PROG, e)
    return run(PROG, serve(config), config.service.log_level)


if __name__ == "__main__":
    sys.exit(main())
