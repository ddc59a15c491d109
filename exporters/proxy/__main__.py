"""`python -m poolscope.exporters.proxy` / `poolscope-proxy-exporter`: the Proxy exporter's
gateway mode, for a Proxy that is not ours (a Python Proxy embeds `ProxyExporter`).

    poolscope-proxy-exporter --gateway llmgw --gateway-metrics-url http://router:9090/metrics \\
        --pool-label pool

Exit codes: 0 after SIGTERM/SIGINT, 2 for invalid flags, 1 when the listen address
cannot be bound.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from poolscope.exporters.common.exposition import (
    ScrapePage,
    metrics_handler,
    process_collectors,
)
from poolscope.exporters.common.sampling import sample_interval
from poolscope.exporters.proxy.gateway import GatewayExporter, GatewayReader
from poolscope.exporters.proxy.gateways import GATEWAYS
from poolscope.exporters.proxy.gateways.pool import Pools
from poolscope.service import ports
from poolscope.service.argtypes import (
    ServiceParser,
    http_url,
    identifier,
    label_name,
    positive_float,
)
from poolscope.service.identity import ID_RULE, valid_id
from poolscope.service.web import (
    Exposure,
    ServiceConfig,
    add_common_flags,
    command,
    read_token,
    serve_until_stopped,
    service_config,
)

PROG = "poolscope-proxy-exporter"
DEFAULT_LISTEN = ports.loopback(ports.PROXY_EXPORTER)
# What a bare --pool-label gives: the gateway's own pool label. Not a string, so
# argparse does not pass it through the label-name check.
GATEWAY_LABEL = object()


@dataclass(frozen=True)
class Config:
    reader: GatewayReader
    interval: float
    service: ServiceConfig


def build_parser() -> ServiceParser:
    p = ServiceParser(prog=PROG, description="Poolscope Proxy exporter, gateway mode: a "
                           "gateway's own /metrics published as Poolscope's Proxy-side series.")
    p.add_argument("--gateway", required=True, choices=sorted(GATEWAYS),
                   help="which gateway's page to read (gie: the endpoint picker, GIE's "
                        "or the llm-d router's)")
    p.add_argument("--gateway-metrics-url", required=True, type=http_url,
                   help="the gateway's /metrics URL (llmgw: its admin listener)")
    pools = p.add_mutually_exclusive_group(required=True)
    pools.add_argument("--proxy-id", type=identifier,
                       help=f"every series of the page is this one pool's ({ID_RULE})")
    pools.add_argument("--pool-label", type=label_name, nargs="?", const=GATEWAY_LABEL,
                       help="the gateway label whose value is the pool's proxy_id "
                            "(default: llmgw `pool`, gie `name`)")
    p.add_argument("--sample-interval", type=sample_interval, default=1.0,
                   help="seconds between reads of the gateway page (default %(default)g)")
    p.add_argument("--gateway-timeout", type=positive_float, default=2.0,
                   help="seconds one read may take (default %(default)g)")
    p.add_argument("--gateway-bearer-token-file", type=Path, metavar="FILE",
                   help="send 'Authorization: Bearer <token>' (the file's content) to the "
                        "gateway; the endpoint picker asks for one by default")
    add_common_flags(p, default_listen=DEFAULT_LISTEN, default_log_level="INFO")
    return p


def parse(argv: Sequence[str] | None = None) -> Config:
    """Parse and validate; raises UsageError with a one-line message."""
    args = build_parser().parse(argv)
    gateway = GATEWAYS[args.gateway]
    pools = (Pools(proxy_id=args.proxy_id) if args.proxy_id is not None
             else Pools(label=gateway.pool_label if args.pool_label is GATEWAY_LABEL
                        else args.pool_label))
    token = (read_token(args.gateway_bearer_token_file, "--gateway-bearer-token-file")
             if args.gateway_bearer_token_file else None)
    reader = GatewayReader(gateway, args.gateway_metrics_url, pools, args.gateway_timeout, token)
    return Config(reader, args.sample_interval, service_config(args))


def make_app(exporter: GatewayExporter, exposure: Exposure | None = None) -> web.Application:
    exposure = exposure or Exposure()
    page = ScrapePage(exporter.registry(), *process_collectors())

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "gateway": exporter.reader.gateway.name})

    async def pool_load(request: web.Request) -> web.Response:
        proxy_id = request.match_info["proxy_id"]
        if not valid_id(proxy_id):
            return web.json_response({"error": f"invalid proxy_id: expected {ID_RULE}"},
                                     status=400)
        report = exporter.load_report(proxy_id)
        if report is None:
            return web.json_response({"error": "no fresh reading of the gateway names "
                                      "this pool with an inflight count"}, status=404)
        return web.json_response(report)

    app = web.Application(middlewares=exposure.middlewares())
    # Rendered on a thread: the page grows with the gateway's endpoints.
    app.router.add_get(exposure.telemetry_path, metrics_handler(page.page, threaded=True))
    app.router.add_get("/healthz", healthz)
    # [^/]+ rather than the default [^{}/]+: braces reach the check and get a 400.
    app.router.add_get("/v1/pool_load/{proxy_id:[^/]+}", pool_load)
    return app


async def serve(config: Config) -> None:
    exporter = GatewayExporter(config.reader, config.interval)
    try:
        await serve_until_stopped(make_app(exporter, config.service.exposure),
                                  config.service, prog=PROG, started=exporter.start)
    finally:
        await exporter.stop()


def main(argv: Sequence[str] | None = None) -> int:
    return command(PROG, argv, parse, serve)


if __name__ == "__main__":
    sys.exit(main())
