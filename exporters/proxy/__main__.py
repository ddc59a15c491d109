"""`python -m exporters.proxy` / `poolscope-proxy-exporter`: the Proxy exporter's
gateway mode, for a Proxy that is not ours (a Python Proxy embeds `ProxyExporter`).

    poolscope-proxy-exporter --gateway llmgw --gateway-metrics-url http://router:9090/metrics \\
        --pool-label pool

Exit codes: 0 after SIGTERM/SIGINT, 2 for invalid flags, 1 when the listen address
cannot be bound.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from exporters.common.argtypes import identifier
from exporters.common.flags import UsageParser, http_url, sample_interval, seconds
from exporters.common.identity import ID_RULE
from exporters.common.web import (
    ServiceConfig,
    add_common_flags,
    command,
    guarded,
    read_token,
    serve_until_stopped,
    service_config,
)
from exporters.proxy.gateway import GatewayExporter, GatewayReader
from exporters.proxy.gateways import GATEWAYS
from exporters.proxy.gateways.pool import Pools

PROG = "poolscope-proxy-exporter"
DEFAULT_LISTEN = "127.0.0.1:9202"


@dataclass(frozen=True)
class Config:
    reader: GatewayReader
    interval: float
    service: ServiceConfig


def build_parser() -> argparse.ArgumentParser:
    p = UsageParser(prog=PROG, description="Poolscope Proxy exporter, gateway mode: a gateway's "
                "own /metrics published as Poolscope's Proxy-side series.")
    p.add_argument("--gateway", required=True, choices=sorted(GATEWAYS),
                   help="which gateway's page to read")
    p.add_argument("--gateway-metrics-url", required=True,
                   help="the gateway's /metrics URL (llmgw: its admin listener)")
    pools = p.add_mutually_exclusive_group(required=True)
    pools.add_argument("--proxy-id", type=identifier,
                       help=f"every series of the page is this one pool's ({ID_RULE})")
    pools.add_argument("--pool-label", nargs="?", const="",
                       help="the gateway label whose value is the pool's proxy_id "
                            "(default: llmgw `pool`, gie `name`)")
    p.add_argument("--sample-interval", type=float, default=1.0,
                   help="seconds between reads of the gateway page (default 1)")
    p.add_argument("--gateway-timeout", type=float, default=2.0,
                   help="seconds one read may take (default 2)")
    p.add_argument("--gateway-bearer-token-file", type=Path, metavar="FILE",
                   help="send 'Authorization: Bearer <token>' (the file's content) to the "
                        "gateway; GIE's endpoint picker asks for one by default")
    add_common_flags(p, default_listen=DEFAULT_LISTEN, default_log_level="INFO")
    return p


def parse(argv: Sequence[str] | None = None) -> Config:
    args = build_parser().parse_args(argv)
    gateway = GATEWAYS[args.gateway]
    pools = (Pools(proxy_id=args.proxy_id) if args.proxy_id is not None
             else Pools(label=args.pool_label or gateway.pool_label))
    interval = sample_interval("--sample-interval", args.sample_interval)
    timeout = seconds("--gateway-timeout", args.gateway_timeout)
    url = http_url("--gateway-metrics-url", args.gateway_metrics_url)
    token = (read_token(args.gateway_bearer_token_file, "--gateway-bearer-token-file")
             if args.gateway_bearer_token_file else None)
    reader = GatewayReader(gateway, url, pools, timeout, token)
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
    return command(PROG, argv, parse, serve)


if __name__ == "__main__":
    sys.exit(main())
