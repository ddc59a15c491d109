"""`python -m scheduler_bridge` / `poolscope-scheduler-bridge`: serve pool summaries.

Exit codes: 0 after SIGTERM/SIGINT, 2 for invalid flags, 1 when the listen
address cannot be bound.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from aiohttp import web

from exporters.common.argtypes import (
    OneLineErrorParser,
    non_negative_float,
    positive_float,
    positive_int,
)
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


def add_bridge_flags(p: argparse.ArgumentParser) -> None:
    """What both bridges need to read rollups; the Proxy bridge takes them too."""
    p.add_argument("--prometheus-url", action="append", required=True, metavar="URL",
                   help="Prometheus HTTP API base URL; repeat for an HA pair (tried in order)")
    p.add_argument("--cache-ttl", type=non_negative_float, default=1.0, metavar="S",
                   help="seconds one snapshot is shared by all requests (0: every request)")
    p.add_argument("--stale-after", type=non_negative_float, default=30.0, metavar="S",
                   help="serve the last good snapshot, marked stale, at most this old")
    p.add_argument("--query-timeout", type=positive_float, default=5.0, metavar="S",
                   help="per-backend timeout of one query")
    p.add_argument("--query-shards", type=positive_int, default=1, metavar="N",
                   help="split the snapshot query by rollup name into N concurrent queries "
                        "at the same evaluation time (parse overlaps evaluation)")
    p.add_argument("--fresh-for", type=positive_float, default=Settings.fresh_for_s,
                   metavar="S", help="rollups the rules wrote longer ago than this are "
                                     "served marked stale (default %(default)g)")
    p.add_argument("--answer-within", type=positive_float, default=Settings.answer_within_s,
                   metavar="S", help="a request waits this long for a refresh in flight, "
                                     "then gets the last snapshot marked stale "
                                     "(default %(default)g)")
    p.add_argument("--query-max-bytes", type=positive_int, default=Settings.max_answer_bytes,
                   metavar="N", help="refuse a backend answer larger than this "
                                     "(default %(default)d)")
    p.add_argument("--max-clock-skew", type=non_negative_float, default=Settings.max_clock_skew_s,
                   metavar="S", help="refuse answers from a backend whose clock (its Date "
                                     "header) differs from this host's by more "
                                     "(default %(default)g)")


def _settings_from(args: argparse.Namespace, auth_token: str | None) -> Settings:
    """The bridge settings of a parser built with `add_bridge_flags`."""
    return Settings(backends=tuple(args.prometheus_url), cache_ttl_s=args.cache_ttl,
                    stale_after_s=args.stale_after, query_timeout_s=args.query_timeout,
                    auth_token=auth_token, query_shards=args.query_shards,
                    fresh_for_s=args.fresh_for, answer_within_s=args.answer_within,
                    max_answer_bytes=args.query_max_bytes, max_clock_skew_s=args.max_clock_skew)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineErrorParser(
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
