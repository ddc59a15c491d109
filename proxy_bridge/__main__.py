"""`python -m proxy_bridge` / `poolscope-proxy-bridge`: serve one pool, in detail.

The flags the Scheduler bridge has mean the same here and are taken from its parser;
this bridge adds `--proxy-id` (checked before anything starts, since it goes into
PromQL) and listens on 8003 by default.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import ssl
import sys
from collections.abc import Sequence

from proxy_bridge.app import create_app
from proxy_bridge.promql import InvalidProxyId, validate_proxy_id
from scheduler_bridge.__main__ import _settings, _tls, build_parser, parse_listen, serve

PROG = "poolscope-proxy-bridge"


def _proxy_id(text: str) -> str:
    try:
        return validate_proxy_id(text)
    except InvalidProxyId as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, parents=[build_parser()], conflict_handler="resolve",
        description="Serve one Proxy pool's summary, its Proxy-local detail and the "
                    "provenance of every field.")
    p.add_argument("--proxy-id", type=_proxy_id, required=True, metavar="PID",
                   help="the pool this bridge serves, e.g. hp_127.0.0.1:8001 "
                        "(1-128 of [A-Za-z0-9_.:-])")
    p.add_argument("--listen", type=parse_listen, default=("127.0.0.1", 8003),
                   metavar="HOST:PORT", help="default 127.0.0.1:8003 (loopback)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        app = create_app(args.proxy_id, _settings(args))
        tls = _tls(args)
    except (OSError, ValueError, ssl.SSLError) as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    host, port = args.listen
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(serve(app, host, port, tls))
    except OSError as e:
        print(f"{PROG}: cannot listen on {host}:{port}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
