"""`python -m scheduler_bridge` / `poolscope-scheduler-bridge`: serve pool summaries.

Exit codes: 0 after SIGTERM/SIGINT, 2 for invalid flags, 1 when the listen
address cannot be bound.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from aiohttp import web

from exporters.common.web import (
    HttpLimits,
    UsageError,
    add_common_flags,
    refuse,
    run,
    serve_until_stopped,
    service_config,
)
from scheduler_bridge.app import Settings, create_app
from scheduler_bridge.heap import keep_freed_memory

PROG = "poolscope-scheduler-bridge"


def _non_negative(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text}: must be >= 0")
    return value


def add_bridge_flags(p: argparse.ArgumentParser) -> None:
    """What both bridges need to read rollups; the Proxy bridge takes them too."""
    p.add_argument("--prometheus-url", action="append", required=True, metavar="URL",
                   help="Prometheus HTTP API base URL; repeat for an HA pair (tried in order)")
    p.add_argument("--cache-ttl", type=_non_negative, default=1.0, metavar="S",
                   help="seconds one snapshot is shared by all requests (0: every request)")
    p.add_argument("--stale-after", type=_non_negative, default=30.0, metavar="S",
                   help="serve the last good snapshot, marked stale, at most this old")
    p.add_argument("--query-timeout", type=_non_negative, default=5.0, metavar="S",
                   help="per-backend timeout of one query")
    p.add_argument("--query-shards", type=int, default=1, metavar="N",
                   help="split the snapshot query by rollup name into N concurrent queries "
                        "at the same evaluation time (parse overlaps evaluation)")


def _settings_from(args: argparse.Namespace, auth_token: str | None) -> Settings:
    """The bridge settings of a parser built with `add_bridge_flags`."""
    return Settings(backends=tuple(args.prometheus_url), cache_ttl_s=args.cache_ttl,
                    stale_after_s=args.stale_after, query_timeout_s=args.query_timeout,
                    auth_token=auth_token, query_shards=args.query_shards)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Serve every Proxy pool's summary from the proxy_pool: rollups.")
    add_bridge_flags(p)
    # Every Scheduler replica and operator polls this one: room for hundreds of clients.
    add_common_flags(p, default_listen="127.0.0.1:7002", default_log_level="INFO",
                     limits=HttpLimits(max_connections=512))
    return p


def serve_bridge(prog: str, args: argparse.Namespace,
                 make_app: Callable[[Settings], web.Application]) -> int:
    """Both bridges' main once their flags parsed: exit codes as in this module's doc."""
    try:
        config = service_config(args)
    except UsageError as e:
        return refuse(prog, e)
    app = make_app(_settings_from(args, config.auth_token))
    keep_freed_memory()
    return run(prog, serve_until_stopped(app, config, prog=prog), config.log_level)


def main(argv: Sequence[str] | None = None) -> int:
    return serve_bridge(PROG, build_parser().parse_args(argv), create_app)


if __name__ == "__main__":
    sys.exit(main())
