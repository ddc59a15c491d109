"""`python -m poolscope.proxy_bridge` / `poolscope-proxy-bridge`: serve one pool, in detail.

The flags the Scheduler bridge has mean the same here and are declared by the same
code (`poolscope.bridge.serve`); this bridge adds `--proxy-id` (checked before anything
starts, since it goes into PromQL) and listens on port 10120 by default. Exit codes as the
Scheduler bridge's.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from poolscope.bridge.serve import add_bridge_flags, serve_bridge
from poolscope.proxy_bridge.app import create_app
from poolscope.service import ports
from poolscope.service.argtypes import ServiceParser, identifier
from poolscope.service.identity import ID_RULE
from poolscope.service.web import add_common_flags

PROG = "poolscope-proxy-bridge"


def build_parser() -> ServiceParser:
    p = ServiceParser(
        prog=PROG, description="Serve one Proxy pool's summary, its Proxy-local detail and "
                               "the provenance of every field.")
    p.add_argument("--proxy-id", type=identifier, required=True, metavar="PID",
                   help=f"the pool this bridge serves, e.g. hp_127.0.0.1:8001 ({ID_RULE})")
    add_bridge_flags(p)
    add_common_flags(p, default_listen=ports.loopback(ports.PROXY_BRIDGE), default_log_level="INFO")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return serve_bridge(PROG, args, lambda settings: create_app(args.proxy_id, settings))


if __name__ == "__main__":
    sys.exit(main())
