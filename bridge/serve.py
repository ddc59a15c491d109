"""Both bridges' command line: the flags that read rollups, and the run once parsed.

Exit codes: 0 after SIGTERM/SIGINT, 2 for invalid flags, 1 when the listen
address cannot be bound.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from aiohttp import web

from poolscope.bridge.app import Settings
from poolscope.service.argtypes import (
    UsageError,
    http_url,
    non_negative_float,
    positive_float,
    positive_int,
    refuse,
)
from poolscope.service.web import Exposure, run, serve_until_stopped, service_config


def add_bridge_flags(p: argparse.ArgumentParser) -> None:
    """What both bridges need to read rollups; the Proxy bridge takes them too."""
    p.add_argument("--prometheus-url", action="append", required=True, type=http_url,
                   metavar="URL",
                   help="Prometheus HTTP API base URL; repeat for an HA pair (tried in order)")
    p.add_argument("--cache-ttl", type=non_negative_float, default=Settings.cache_ttl_s,
                   metavar="S", help="once the rules are due to write again, ask whether "
                                     "they did (one sample) at most every S seconds, and "
                                     "read every pool only when they did; also how long a "
                                     "failure is remembered (0: every request reads every "
                                     "pool; default %(default)g)")
    p.add_argument("--evaluation-interval", type=positive_float,
                   default=Settings.evaluation_interval_s, metavar="S",
                   help="the rules' evaluation interval: after reading rollups written at "
                        "T, nothing is asked before T + S (default %(default)g, as "
                        "deploy/prometheus)")
    p.add_argument("--stale-after", type=non_negative_float, default=Settings.stale_after_s,
                   metavar="S", help="serve the last good snapshot, marked stale, at most "
                                     "this old; at least --fresh-for (default %(default)g)")
    p.add_argument("--query-timeout", type=positive_float, default=Settings.query_timeout_s,
                   metavar="S", help="per-backend timeout of one query (default %(default)g)")
    p.add_argument("--query-shards", type=positive_int, default=Settings.query_shards,
                   metavar="N",
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


def settings_from(args: argparse.Namespace, exposure: Exposure) -> Settings:
    """The bridge settings of a parser built with `add_bridge_flags`; raises UsageError
    when two flags contradict each other."""
    if args.stale_after < args.fresh_for:
        raise UsageError(f"--stale-after {args.stale_after:g} is shorter than --fresh-for "
                         f"{args.fresh_for:g}: a snapshot fresh enough to serve would be refused")
    if args.evaluation_interval > args.fresh_for:
        raise UsageError(f"--evaluation-interval {args.evaluation_interval:g} is longer than "
                         f"--fresh-for {args.fresh_for:g}: every snapshot would go stale "
                         "before the rules are due to write again")
    return Settings(backends=tuple(args.prometheus_url), cache_ttl_s=args.cache_ttl,
                    evaluation_interval_s=args.evaluation_interval,
                    stale_after_s=args.stale_after, query_timeout_s=args.query_timeout,
                    exposure=exposure, query_shards=args.query_shards,
                    fresh_for_s=args.fresh_for, answer_within_s=args.answer_within,
                    max_answer_bytes=args.query_max_bytes, max_clock_skew_s=args.max_clock_skew)


def serve_bridge(prog: str, args: argparse.Namespace,
                 make_app: Callable[[Settings], web.Application]) -> int:
    """Both bridges' main once their flags parsed: exit codes as in this module's doc."""
    try:
        config = service_config(args)
        settings = settings_from(args, config.exposure)
    except UsageError as e:
        return refuse(prog, e)
    app = make_app(settings)
    return run(prog, serve_until_stopped(app, config, prog=prog), config)
