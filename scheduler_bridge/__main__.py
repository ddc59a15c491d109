"""`python -m scheduler_bridge` / `poolscope-scheduler-bridge`: serve pool summaries."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import ssl
import sys
from collections.abc import Sequence
from pathlib import Path

from aiohttp import web

from scheduler_bridge.app import Settings, create_app

log = logging.getLogger("scheduler_bridge")


def parse_listen(text: str) -> tuple[str, int]:
    """host:port, [v6]:port; a bare port stays on loopback."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", text
    host = host.strip("[]") or "127.0.0.1"
    try:
        number = int(port)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--listen {text!r}: expected HOST:PORT") from None
    if not 0 < number < 65536:
        raise argparse.ArgumentTypeError(f"--listen {text!r}: port out of range")
    return host, number


def _positive(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text}: must be >= 0")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="poolscope-scheduler-bridge",
        description="Serve every Proxy pool's summary from the proxy_pool: rollups.")
    p.add_argument("--prometheus-url", action="append", required=True, metavar="URL",
                   help="Prometheus HTTP API base URL; repeat for an HA pair (tried in order)")
    p.add_argument("--listen", type=parse_listen, default=("127.0.0.1", 7002),
                   metavar="HOST:PORT", help="default 127.0.0.1:7002 (loopback)")
    p.add_argument("--cache-ttl", type=_positive, default=1.0, metavar="S",
                   help="seconds one snapshot is shared by all requests (0: every request)")
    p.add_argument("--stale-after", type=_positive, default=30.0, metavar="S",
                   help="serve the last good snapshot, marked stale, at most this old")
    p.add_argument("--query-timeout", type=_positive, default=5.0, metavar="S",
                   help="per-backend timeout of one query")
    p.add_argument("--query-shards", type=int, default=1, metavar="N",
                   help="split the snapshot query by rollup name into N concurrent queries "
                        "at the same evaluation time (parse overlaps evaluation)")
    p.add_argument("--auth-token-file", type=Path, metavar="F",
                   help="require 'Authorization: Bearer <token>' (all but /healthz)")
    p.add_argument("--tls-cert", type=Path, metavar="PEM")
    p.add_argument("--tls-key", type=Path, metavar="PEM")
    p.add_argument("--log-level", default="INFO")
    return p


def _settings(args: argparse.Namespace) -> Settings:
    token = None
    if args.auth_token_file is not None:
        token = args.auth_token_file.read_text().strip()
        if not token:
            raise ValueError(f"{args.auth_token_file} is empty")
    return Settings(backends=tuple(args.prometheus_url), cache_ttl_s=args.cache_ttl,
                    stale_after_s=args.stale_after, query_timeout_s=args.query_timeout,
                    auth_token=token, query_shards=args.query_shards)


def _tls(args: argparse.Namespace) -> ssl.SSLContext | None:
    if (args.tls_cert is None) != (args.tls_key is None):
        raise ValueError("--tls-cert and --tls-key go together")
    if args.tls_cert is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(args.tls_cert, args.tls_key)
    return context


async def serve(app: web.Application, host: str, port: int,
                tls: ssl.SSLContext | None) -> None:
    """Run until SIGINT / SIGTERM, then close connections and the backend session."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port, ssl_context=tls).start()
        log.info("serving on %s://%s:%d", "https" if tls else "http", host, port)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = _settings(args)
        tls = _tls(args)
    except (OSError, ValueError, ssl.SSLError) as e:
        print(f"poolscope-scheduler-bridge: {e}", file=sys.stderr)
        return 2
    host, port = args.listen
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(serve(create_app(settings), host, port, tls))
    except OSError as e:  # the port is taken, the address is not local, ...
        print(f"poolscope-scheduler-bridge: cannot listen on {host}:{port}: {e}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
