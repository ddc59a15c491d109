"""`python -m proxy_bridge` / `poolscope-proxy-bridge`: serve one pool, in detail.

The flags the Scheduler bridge has mean the same here and are declared by the same
code; this bridge adds `--proxy-id` (checked before anything starts, since it goes
into PromQL) and listens on 8003 by default. Exit codes as the Scheduler bridge's.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from exporters.common.argtypes import OneLineErrorParser
from exporters.common.web import add_common_flags
from proxy_bridge.app import create_app
from proxy_bridge.promql import InvalidProxyId, validate_proxy_id
from scheduler_bridge.__main__ import add_bridge_flags, serve_bridge

PROG = "poolscope-proxy-bridge"


def _proxy_id(text: str) -> str:
    try:
        return validate_proxy_id(text)
    except InvalidProxyId as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def parser() -> argparse.ArgumentParser:
    p = OneLineErrorParser(
        prog=PROG, description="Serve one Proxy pool's summary, its Proxy-local detail and "
                               "the provenance of every field.")
    p.add_argument("--proxy-id", type=_proxy_id, required=True, metavar="PID",
                   help="the pool this bridge serves, e.g. hp_127.0.0.1:8001 "
                        "(1-128 of [A-Za-z0-9_.:-])")
    add_bridge_flags(p)
    add_common_flags(p, default_listen="127.0.0.1:8003", default_log_level="INFO")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return serve_bridge(PROG, args, lambda settings: create_app(args.proxy_id, settings))


if __name__ == "__main__":
    sys.exit(main())
