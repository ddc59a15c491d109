"""`poolscope-status [POOL | --idle]`: the fleet on one screen, one pool drilled into
(its Instances, their GPUs, its last 15 minutes), or what can be stopped (the
Instances idle past the idle threshold and the GPUs they hold), read from the
Scheduler bridge.

It reads the bridge rather than Prometheus so that it shows exactly what the
Scheduler is served, snapshot for snapshot; a pool's Instances and trend are what the
bridge's drill-down route read from Prometheus at that snapshot's time. Exit codes:
0 shown, 1 the bridge could not be read or does not know POOL (one line on stderr says
why), 2 bad flags. Under `--watch` a failed read is shown in place of the screen and
the next one is tried: a bridge restart should not end a watch, and Ctrl-C ends it
with 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import quote

import aiohttp

from poolscope.scheduler_bridge.client import (
    BridgeError,
    BridgeUnreachable,
    SchedulerBridgeClient,
)
from poolscope.scheduler_bridge.idle_instances import ROUTE as IDLE_ROUTE
from poolscope.scheduler_bridge.status.idle_text import render_idle_text
from poolscope.scheduler_bridge.status.idle_view import IdleView, parse_idle_view
from poolscope.scheduler_bridge.status.model import FleetView, build_view
from poolscope.scheduler_bridge.status.pool_view import PoolDetailView, build_pool_detail
from poolscope.scheduler_bridge.status.text import Style, render_pool_text, render_text
from poolscope.service import ports
from poolscope.service.argtypes import (
    ServiceParser,
    UsageError,
    http_url,
    identifier,
    positive_float,
    positive_int,
    refuse,
)
from poolscope.service.web import read_token

PROG = "poolscope-status"
DEFAULT_URL = f"http://{ports.loopback(ports.SCHEDULER_BRIDGE)}"
WATCH_DEFAULT_S = 2.0
# Faster than the bridge's cache TTL only re-reads one snapshot; slower than an hour
# is a cron job, not a watch.
WATCH_MIN_S, WATCH_MAX_S = 0.5, 3600.0
CLEAR = "\x1b[H\x1b[2J"


class ReadFailed(Exception):
    """The bridge could not be read; the message is the one line a user sees."""


def watch_interval(text: str) -> float:
    value = positive_float(text)
    if not WATCH_MIN_S <= value <= WATCH_MAX_S:
        raise argparse.ArgumentTypeError(
            f"{text}: between {WATCH_MIN_S:g} and {WATCH_MAX_S:g} seconds")
    return value


def build_parser() -> ServiceParser:
    p = ServiceParser(
        prog=PROG, description="Every pool's load, Instances and GPU capacity on one screen, "
                               "one pool's Instances, GPUs and last 15 minutes, or what "
                               "can be stopped (--idle), from the Scheduler bridge. '?' is "
                               "unknown, never zero.")
    p.add_argument("pool", nargs="?", type=identifier, metavar="POOL",
                   help="drill into this pool (its proxy_id)")
    p.add_argument("--bridge-url", type=http_url, default=DEFAULT_URL, metavar="URL",
                   help="Scheduler bridge base URL (default %(default)s)")
    p.add_argument("--auth-token-file", type=Path, metavar="F",
                   help="send 'Authorization: Bearer <token>' with the token in F")
    p.add_argument("--timeout", type=positive_float, default=5.0, metavar="S",
                   help="seconds to wait for the bridge (default %(default)g)")
    p.add_argument("--idle", action="store_true",
                   help="what can I stop: the Instances idle past the idle threshold, the "
                        "GPUs they hold per model, and apart those whose idleness is unknown")
    p.add_argument("--json", action="store_true",
                   help="print the view as JSON (one document per refresh under --watch)")
    p.add_argument("--watch", type=watch_interval, nargs="?", const=WATCH_DEFAULT_S,
                   metavar="SECONDS",
                   help=f"refresh every SECONDS (default {WATCH_DEFAULT_S:g}, "
                        f"{WATCH_MIN_S:g}..{WATCH_MAX_S:g}) until Ctrl-C")
    p.add_argument("--count", type=positive_int, metavar="N",
                   help="with --watch: stop after N refreshes")
    return p


View = FleetView | PoolDetailView | IdleView


async def read_view(client: SchedulerBridgeClient, url: str, pool: str | None,
                    idle: bool) -> View:
    """The fleet, what can be stopped in it, or POOL's drill-down; the fleet's trends
    are left out of the terminal view, which has no room for them beside the bars."""
    what = ("idle Instances" if idle else "pool snapshot" if pool is None
            else f"drill-down of pool {pool}")
    try:
        if idle:
            return parse_idle_view(await client.get(IDLE_ROUTE))
        if pool is None:
            return build_view(await client.snapshot())
        doc: Any = await client.get(f"/debug/pool_detail/{quote(pool, safe='')}")
        return build_pool_detail(doc)
    except BridgeUnreachable as e:
        raise ReadFailed(f"bridge {url} unreachable: {e}") from e
    except BridgeError as e:
        if e.status is None:
            raise ReadFailed(f"bridge {url} sent no {what}: {e}") from e
        raise ReadFailed(f"bridge {url} answered {e}") from e
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ReadFailed(f"bridge {url} sent no {what}: {e!r}") from e


def render(view: View, as_json: bool, out: TextIO) -> str:
    if as_json:
        return json.dumps(view.as_dict(), allow_nan=False)
    tty = out.isatty()
    encoding = out.encoding or "ascii"
    try:
        "█░…".encode(encoding)
        unicode = True
    except (UnicodeEncodeError, LookupError):
        unicode = False
    style = Style(width=shutil.get_terminal_size().columns,
                  colour=tty and "NO_COLOR" not in os.environ, unicode=unicode)
    if isinstance(view, PoolDetailView):
        return render_pool_text(view, style)
    if isinstance(view, IdleView):
        return render_idle_text(view, style)
    return render_text(view, style)


async def run(args: argparse.Namespace, token: str | None, out: TextIO) -> int:
    async with aiohttp.ClientSession() as session:
        client = SchedulerBridgeClient(args.bridge_url, session, token=token,
                                       timeout_s=args.timeout)
        if args.watch is None:
            try:
                view = await read_view(client, args.bridge_url, args.pool, args.idle)
            except ReadFailed as e:
                print(f"{PROG}: {e}", file=sys.stderr)
                return 1
            print(render(view, args.json, out), file=out)
            return 0
        return await _watch(client, args, out)


async def _watch(client: SchedulerBridgeClient, args: argparse.Namespace, out: TextIO) -> int:
    """Redraw until Ctrl-C or --count; the exit code is the last read's.

    Ctrl-C sets a flag the loop checks between frames rather than cancelling the read
    in flight: a cancellation that meets the HTTP client's own timeout can come out as
    a timeout, a failed read, and a watch that never ends."""
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, stopped.set)
    try:
        return await _redraw(client, args, out, stopped)
    finally:
        loop.remove_signal_handler(signal.SIGINT)


async def _redraw(client: SchedulerBridgeClient, args: argparse.Namespace, out: TextIO,
                  stopped: asyncio.Event) -> int:
    clear = CLEAR if out.isatty() and not args.json else ""
    shown = 0
    while not stopped.is_set():
        try:
            frame, code = render(await read_view(client, args.bridge_url, args.pool, args.idle),
                                 args.json, out), 0
        except ReadFailed as e:
            # The old screen goes: left up, it would pass for the current state.
            frame, code = "", 1
            print(clear, end="", file=out, flush=True)
            print(f"{PROG}: {e}", file=sys.stderr, flush=True)
        if frame:
            print(f"{clear}{frame}", file=out, flush=True)
        shown += 1
        if args.count is not None and shown >= args.count:
            return code
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopped.wait(), args.watch)
    return 0  # Ctrl-C: the user chose to stop, nothing failed


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.count is not None and args.watch is None:
        parser.error("--count needs --watch")
    if args.idle and args.pool is not None:
        parser.error("--idle shows every pool: no POOL with it")
    try:
        token = read_token(args.auth_token_file) if args.auth_token_file else None
    except UsageError as e:
        return refuse(PROG, e)
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(run(args, token, sys.stdout))
    return 0  # Ctrl-C: the user chose to stop, nothing failed


if __name__ == "__main__":
    sys.exit(main())
