"""How every Poolscope service faces HTTP: the Instance exporter and both bridges.

They share one threat model (more than Prometheus may reach them), so they
share one implementation of it rather than three that drift: what one client can hold
or send is bounded (`HttpLimits`, enforced by `serving`), request bodies are refused
(no endpoint takes one), optional credentials (a bearer token, basic-auth users:
`poolscope.service.auth`) guard all but /healthz (which liveness probes must reach
without a secret), TLS wraps the whole listener, and every error is JSON with a cause.
The common flags are declared here too, so a flag means the same on every service and
a bad value is refused the same way: one line, exit 2.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import collections
import contextlib
import fcntl
import itertools
import logging
import os
import re
import resource
import signal
import ssl
import sys
import termios
import time
from asyncio import sslproto
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from aiohttp import web
from aiohttp.typedefs import Middleware
from aiohttp.web_protocol import RequestHandler
from prometheus_client import Histogram

from poolscope.service import auth, logs
from poolscope.service.argtypes import (
    Listen,
    UsageError,
    parse_listen,
    positive_float,
    positive_int,
    refuse,
)
from poolscope.service.auth import OPEN_PATHS, Access, access_control
from poolscope.service.logs import FORMATS, log_level

METRICS_PATH = "/metrics"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ExceptionHandler = Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object]


class ListenError(Exception):
    """The listen address could not be bound; the message is the one line to print."""


# --- limits and the listener -----------------------------------------------------

@dataclass(frozen=True)
class HttpLimits:
    """What one client may hold or send; the defaults leave room for an HA pair of
    Prometheus servers and a few people, not for an open internet listener."""

    max_connections: int = 64
    # Also the deadline for a new connection's first request head: aiohttp arms
    # its keep-alive timer when the connection is made.
    idle_timeout_s: float = 30.0
    # A TLS handshake is two round trips and a few milliseconds of work; one still
    # unfinished after this is not a scraper but a socket holding a descriptor.
    # Also the deadline for a TLS close: a peer that never answers close_notify.
    handshake_timeout_s: float = 5.0
    max_header_bytes: int = 8190  # one request line or header field
    max_headers: int = 64
    # How long an unread (refused) body is drained so the client sees the 413
    # rather than a reset; aiohttp's 10 s default would let a declared-but-unsent
    # body hold the connection that long.
    linger_s: float = 1.0

    def __post_init__(self) -> None:
        if self.max_connections < 1 or self.max_header_bytes < 1 or self.max_headers < 1:
            raise ValueError("HTTP limits must be positive")
        if (not self.idle_timeout_s > 0 or not self.handshake_timeout_s > 0
                or not self.linger_s >= 0):
            raise ValueError("timeouts must be positive, linger time not negative")


# Descriptors kept from the connections for everything else a service opens after
# it starts listening: NVML's device files (2 + 1 a GPU, 10 for 8 GPUs), the host
# collector's /proc reads (one at a time), the engine reader's and the bridges'
# Prometheus connections (their refreshes run one at a time: a few), bcrypt's thread
# (none). About 20 at most (a running exporter without GPUs holds 11 in all);
# three times that, so no collector meets "Too many open files" at the cap.
DESCRIPTOR_RESERVE = 64
# asyncio accepts up to `backlog` connections in one loop turn before the cap sees
# them, and a connection the cap closes holds its descriptor one more turn: at the
# cap, connections hold up to cap + 2 x backlog descriptors.
_MAX_BACKLOG, _MIN_BACKLOG = 128, 8
# asyncio also gives `backlog` to listen(); the kernel's queue is then set longer,
# since connections waiting there hold no descriptor. A flood of a few thousand
# sockets then waits its turn there with the scrapers, where a short queue would
# drop their SYNs and cost each a retransmit a second later (Linux caps this at
# net.core.somaxconn, 4096 by default).
LISTEN_QUEUE = 4096

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DescriptorBudget:
    """How many connections, and how large an accept burst, fit under RLIMIT_NOFILE."""

    connections: int
    backlog: int


def descriptor_budget(wanted: int) -> DescriptorBudget:
    """The connection cap and listen backlog that keep every connection's descriptor,
    an accept burst included, below the soft RLIMIT_NOFILE less the descriptors open
    now and DESCRIPTOR_RESERVE; `wanted` connections when they fit.

    systemd gives a service 1,024 unless its unit says otherwise: the default caps
    (64, and the Scheduler bridge's 512) fit with room to spare. One listener per
    process, as every service has: the budget is the process's.
    """
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return DescriptorBudget(wanted, _MAX_BACKLOG)
    room = soft - len(os.listdir("/proc/self/fd")) - DESCRIPTOR_RESERVE
    backlog = max(_MIN_BACKLOG, min(_MAX_BACKLOG, room // 4))
    return DescriptorBudget(max(1, min(wanted, room - 2 * backlog)), backlog)


_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
         b"Content-Length: 22\r\nConnection: close\r\n\r\ntoo many connections\r\n")


class _Busy(asyncio.Protocol):
    """Answers a connection over the cap with a 503 and closes it, so the client
    learns why instead of seeing a reset."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        transport.write(_BUSY)
        transport.close()


class _Tls(sslproto.SSLProtocol):
    """TLS on one accepted socket, known to the cap from the accept until the socket
    is closed.

    With `create_server(ssl=...)`, asyncio hands aiohttp its connection only once
    the handshake is done, so the cap never saw a handshake in progress: sockets
    that never finish one held a descriptor each, uncounted, until the process ran
    out. The listener serves plain TCP and puts TLS on each socket here instead,
    with the class asyncio uses inside for the same job.
    """

    # asyncio reads 256 KiB at a time, a buffer per connection; a request head fits
    # in 8 KiB and a TLS record in 16 KiB.
    max_size = 32 * 1024

    def __init__(self, app: asyncio.Protocol, context: ssl.SSLContext, timeout_s: float,
                 cap: _ConnectionCap) -> None:
        loop = asyncio.get_running_loop()
        super().__init__(loop, app, context, None, server_side=True,
                         ssl_handshake_timeout=timeout_s, ssl_shutdown_timeout=timeout_s)
        self.app = app  # SSLProtocol forgets its own at the close
        self.accepted = loop.time()
        self.socket: asyncio.Transport | None = None
        self._cap = cap

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.socket = transport
        admitted = self._cap.admit(self)
        super().connection_made(transport)
        if not admitted:
            transport.abort()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._cap.forget(self)
        super().connection_lost(exc)


def _closing(handler: RequestHandler) -> bool:
    return handler.transport is None or handler.transport.is_closing()


def _idle_since(handler: RequestHandler) -> float | None:
    """A key that is smaller the longer the connection has been idle (its keep-alive
    deadline); None while a request is on it or it is closing.

    aiohttp does not publish this, so it is read where aiohttp's own keep-alive
    timer reads it. A connection is idle while it waits for its next request head,
    or before its first one has arrived; once a request has been parsed, it is
    busy until aiohttp waits again. Should aiohttp rename these, every connection
    reads as busy, which is the plain cap of before: over-cap clients get the 503.
    """
    if _closing(handler):
        return None
    waiter = getattr(handler, "_waiter", None)
    waiting = waiter is not None and not waiter.done()
    unstarted = (waiter is None and getattr(handler, "_request_count", 1) == 0
                 and not getattr(handler, "_messages", True))
    since = getattr(handler, "_next_keepalive_close_time", None)
    return since if (waiting or unstarted) and isinstance(since, float) else None


def _has_unread_bytes(handler: RequestHandler) -> bool:
    """Bytes the kernel holds that the loop has not read yet: a request that has
    arrived but not been parsed. Closing then would reset a client whose request
    is already on its way, so such a connection is not idle."""
    transport = handler.transport
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None:
        return False
    count = array.array("i", [0])
    try:
        fcntl.ioctl(sock.fileno(), termios.FIONREAD, count)
    except OSError:
        return False  # a socket that cannot say is broken: closing it is no loss
    return count[0] > 0


# What a connection at the cap is doing, in the order the cap gives slots up: a
# handshake, a wait for a password check, an idle keep-alive; the TLS connection
# arriving goes last of its address, so it takes an idle one's slot, not its own.
_HANDSHAKING, _CHECKING, _IDLE, _ARRIVING = range(4)


class _ConnectionCap:
    """Protocol factory in front of aiohttp's: at most `limit` live connections,
    counted from the accept, a TLS handshake in progress included. (asyncio calls
    a protocol factory a loop turn after the accept, so one turn's burst of plain
    accepts can pass the cap; the next new connections bring it back. A TLS
    connection is admitted when its socket is, its client's address known.)

    A connection keeps its slot only while it does work. At the cap a new one
    takes the slot of one that does none, as nginx reuses its idle keep-alive
    connections when worker_connections run short: otherwise sockets that send
    nothing, never finish a TLS handshake, or wait behind a flood of password
    checks (`auth.waiting_since`) hold every slot and lock out the clients with
    work. The slot given up is taken from the client address holding the most, a
    new TLS connection counting for its own, so one address flooding cannot close
    a scraper on another; within an address, a handshake goes first (one older than
    a few milliseconds is not a scraper's), then a password check waiting, then the
    longest idle keep-alive, the newest TLS connection last. A server may close an
    idle keep-alive connection at any time; clients retry an idempotent request on
    a new one. When every other slot has a request at work, a new plain connection
    is answered 503, a new TLS one closed at once (a 503 would first cost the
    handshake there is no room for).
    """

    def __init__(self, server: web.Server, limit: int, tls: ssl.SSLContext | None,
                 handshake_timeout_s: float) -> None:
        self._server = server
        self._limit = limit
        self._tls = tls
        self._handshake_timeout_s = handshake_timeout_s
        # TLS sockets from accept to close, by the protocol they carry.
        self._sockets: dict[asyncio.BaseProtocol, _Tls] = {}
        # Closing connections whose slot a new one has taken: a connection is
        # gone a loop turn after it starts closing, so its slot is free now, but
        # only once, or a burst of new connections would pass the cap.
        self._handed_over: set[asyncio.BaseProtocol] = set()

    def __call__(self) -> asyncio.BaseProtocol:
        if self._tls is not None:
            return _Tls(self._server(), self._tls, self._handshake_timeout_s, self)
        handler = self._server()
        return handler if self._make_room(handler, None) else _Busy()

    def admit(self, tls: _Tls) -> bool:
        """Count a TLS socket from now; False when it is the one to close."""
        self._sockets[tls.app] = tls
        return self._make_room(tls.app, tls)

    def forget(self, tls: _Tls) -> None:
        self._sockets.pop(tls.app, None)

    def _make_room(self, arriving: asyncio.BaseProtocol, tls: _Tls | None) -> bool:
        """Close what must go for `arriving` to have a slot; False when that is
        `arriving` itself (a TLS connection), or nothing can go (a plain one)."""
        handlers: set[asyncio.BaseProtocol] = set(self._server.connections)
        live = handlers.union(self._sockets, [arriving])
        self._handed_over.intersection_update(live)
        # More than one slot to free when a burst of accepts, all made in the same
        # loop turn, went past the cap: each new connection then brings it back.
        excess = len(live) - len(self._handed_over) - self._limit
        if excess <= 0:
            return True
        freed = list(itertools.islice(self._freeable(live, handlers, tls), excess))
        for connection in freed:
            self._close(connection)
            self._handed_over.add(connection)
        return bool(freed) and arriving not in freed

    def _close(self, connection: asyncio.BaseProtocol) -> None:
        """At once: a TLS socket is aborted, since a polite TLS close waits for the
        peer's close_notify, which a flood never sends."""
        tls = self._sockets.get(connection)
        if tls is not None and tls.socket is not None:
            tls.socket.abort()
        elif isinstance(connection, RequestHandler) and not _closing(connection):
            connection.force_close()

    def _freeable(self, live: set[asyncio.BaseProtocol], handlers: set[asyncio.BaseProtocol],
                  arriving: _Tls | None) -> Iterator[asyncio.BaseProtocol]:
        """Slots to hand over: connections already closing, then those doing no
        work, from the address holding the most slots first."""
        closing = [c for c in live
                   if c not in self._handed_over and self._is_closing(c, handlers)]
        yield from closing
        peers = {c: self._peer(c) for c in live}
        held = collections.Counter(peers.values())
        idle = [(-held[peers[c]], *state, id(c), c) for c in live
                if c not in self._handed_over and c not in closing
                and (state := self._state(c, handlers, arriving)) is not None]
        idle.sort(key=lambda entry: entry[:4])
        yield from (entry[-1] for entry in idle)

    def _state(self, connection: asyncio.BaseProtocol, handlers: set[asyncio.BaseProtocol],
               arriving: _Tls | None) -> tuple[int, float] | None:
        """What `connection` is doing, and since when, if that is no work; None when
        it has a request at work (or is a plain one just accepted)."""
        if connection not in handlers:
            tls = self._sockets.get(connection)
            if tls is None:
                return None
            return (_ARRIVING, tls.accepted) if tls is arriving else (_HANDSHAKING, tls.accepted)
        assert isinstance(connection, RequestHandler)
        checking = auth.waiting_since(connection)
        if checking is not None:
            return _CHECKING, checking
        idle = _idle_since(connection)
        return None if idle is None or _has_unread_bytes(connection) else (_IDLE, idle)

    def _is_closing(self, connection: asyncio.BaseProtocol,
                    handlers: set[asyncio.BaseProtocol]) -> bool:
        tls = self._sockets.get(connection)
        if tls is not None and tls.socket is not None and tls.socket.is_closing():
            return True
        # A handler has no transport of its own before aiohttp has it (for TLS, before
        # the handshake is done): that is not closing.
        return (isinstance(connection, RequestHandler) and connection in handlers
                and _closing(connection))

    def _peer(self, connection: asyncio.BaseProtocol) -> str:
        tls = self._sockets.get(connection)
        transport = tls.socket if tls is not None else getattr(connection, "transport", None)
        peer = transport.get_extra_info("peername") if transport is not None else None
        return str(peer[0]) if isinstance(peer, tuple) else ""


class AcceptErrors:
    """The loop's exception handler while serving: "socket.accept() out of system
    resource" (descriptors or memory exhausted) becomes one warning line per
    `every_s` seconds with a count, not a traceback per try.

    asyncio retries the accept a second later, but its loop goes on trying the
    rest of the backlog first and reports each failure, so a flood past the
    descriptor limit used to write megabytes of identical tracebacks a second.
    Everything else goes to the handler there was before.
    """

    MESSAGE = "socket.accept() out of system resource"

    def __init__(self, previous: ExceptionHandler | None, every_s: float = 10.0) -> None:
        self._previous = previous
        self._every_s = every_s
        self._last: float | None = None
        self._unreported = 0

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") != self.MESSAGE:
            if self._previous is None:
                loop.default_exception_handler(context)
            else:
                self._previous(loop, context)
            return
        self._unreported += 1
        now = loop.time()
        if self._last is not None and now - self._last < self._every_s:
            return
        _log.warning("accept() failed %d times since the last report (%s): new connections "
                     "wait in the listen queue; raise LimitNOFILE or lower --max-connections",
                     self._unreported, context.get("exception"))
        self._last, self._unreported = now, 0


@asynccontextmanager
async def serving(app: web.Application, host: str, port: int, *,
                  tls: ssl.SSLContext | None = None,
                  limits: HttpLimits | None = None) -> AsyncIterator[tuple[str, int]]:
    """Listen on host:port (0: any free port) until the block ends; yields the bound
    address. Raises OSError when the address cannot be bound.

    Not `web.TCPSite`: its connections are uncapped and kept alive for an hour, so a
    flood of half-sent requests exhausts the descriptors and accept() stops.
    """
    limits = limits or HttpLimits()
    budget = descriptor_budget(limits.max_connections)
    if budget.connections < limits.max_connections:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        _log.warning("--max-connections %d lowered to %d: the descriptor limit (%d) keeps "
                     "%d for the collectors; raise LimitNOFILE for more",
                     limits.max_connections, budget.connections, soft, DESCRIPTOR_RESERVE)
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=limits.idle_timeout_s,
                           max_line_size=limits.max_header_bytes,
                           max_field_size=limits.max_header_bytes,
                           max_headers=limits.max_headers, lingering_time=limits.linger_s)
    await runner.setup()
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()
    try:
        assert runner.server is not None  # set by setup()
        cap = _ConnectionCap(runner.server, budget.connections, tls,
                             min(limits.handshake_timeout_s, limits.idle_timeout_s))
        server = await loop.create_server(cap, host, port, backlog=budget.backlog)
        for listening in server.sockets:
            with listening.dup() as sock:
                sock.listen(LISTEN_QUEUE)
        loop.set_exception_handler(AcceptErrors(previous))
        try:
            bound = server.sockets[0].getsockname()
            yield str(bound[0]), int(bound[1])
        finally:
            server.close()
    finally:
        loop.set_exception_handler(previous)
        await runner.cleanup()


# --- middlewares ------------------------------------------------------------------

def json_error(status: int, message: str, **extra: Any) -> web.Response:
    """An error a client can log as is: the cause, and whatever identifies the case."""
    return web.json_response({"error": message, **extra}, status=status)


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """aiohttp's own 404/405 become JSON like every other error of these APIs."""
    try:
        return await handler(request)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        return json_error(e.status, e.reason)


@web.middleware
async def no_body(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every endpoint is a GET without a body; one that comes anyway is not read."""
    if request.body_exists:
        return json_error(413, "this API takes no request body")
    return await handler(request)


def response_headers(headers: Mapping[str, str]) -> Middleware:
    """The headers a web config sets (HSTS, X-Frame-Options, ...) on every answer."""
    @web.middleware
    async def add(request: web.Request, handler: Handler) -> web.StreamResponse:
        response = await handler(request)
        response.headers.update(headers)
        return response
    return add


def guarded(access: Access | None, headers: Mapping[str, str] | None = None) -> list[Middleware]:
    """The middlewares every service runs, outermost first: the web config's response
    headers, JSON errors, access control when credentials are configured (before
    anything else reads the request, so every answer to a client without them closes
    the connection), no bodies."""
    return [*([response_headers(headers)] if headers else []), json_errors,
            *([access_control(access, json_error)] if access and access.required else []),
            no_body]


def timing(histogram: Histogram) -> Middleware:
    """Observe every answer in `histogram`, labelled (route, status)."""
    @web.middleware
    async def timed(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as e:
            status = e.status
            raise
        finally:
            # The route template, never the raw path: a client cannot mint label values.
            route = request.match_info.route.resource
            name = route.canonical if route is not None else "unmatched"
            histogram.labels(name, str(status)).observe(time.perf_counter() - started)
    return timed


# --- the common flags -------------------------------------------------------------

# The paths the services answer besides their Prometheus page; the page cannot take one.
SERVED_PATHS = frozenset({"/healthz", "/readyz", "/status"})
SERVED_PREFIXES = ("/v1/", "/debug/", "/status/")


def telemetry_path(value: str) -> str:
    """Where /metrics is served: an absolute path a URL can carry as is, and none a
    service already answers (its routes would then clash at start-up)."""
    segments = value.split("/")[1:]
    if (not re.fullmatch(r"/[A-Za-z0-9._~/-]*", value) or value == "/" or "//" in value
            or any(s in (".", "..") for s in segments)):  # a request path is normalised
        raise argparse.ArgumentTypeError(
            f"expected an absolute path such as /metrics, got {value!r}")
    if value.rstrip("/") in SERVED_PATHS or value.startswith(SERVED_PREFIXES):
        raise argparse.ArgumentTypeError(
            f"{value!r} is served already (/healthz, /readyz, /status, /v1/..., /debug/...)")
    return value


def add_common_flags(p: argparse.ArgumentParser, *, default_listen: str,
                     default_log_level: str, limits: HttpLimits | None = None) -> None:
    """The flags every service takes; `service_config` turns them into a ServiceConfig.

    Named as node_exporter and every exporter-toolkit service names them
    (`--web.listen-address`, `--web.telemetry-path`, `--web.config.file`, `--log.level`,
    `--log.format`), so an operator's habits and a Helm chart's values carry over;
    the names Poolscope used first stay as aliases. `limits` sets the defaults: a
    service many clients poll at once (the Scheduler bridge) needs a higher
    connection cap than one a few Prometheus servers scrape.
    """
    p.add_argument("--web.listen-address", "--listen", dest="listen", type=parse_listen,
                   default=default_listen, metavar="HOST:PORT",
                   help=f"address to serve on (default {default_listen}); a bare PORT "
                        "stays on loopback")
    p.add_argument("--web.telemetry-path", dest="telemetry_path", type=telemetry_path,
                   default=METRICS_PATH, metavar="PATH",
                   help=f"path of the Prometheus page (default {METRICS_PATH})")
    p.add_argument("--web.config.file", dest="web_config_file", type=Path, metavar="FILE",
                   help="exporter-toolkit web config: TLS (tls_server_config), client CAs, "
                        "basic-auth users with bcrypt hashes (basic_auth_users)")
    p.add_argument("--auth-token-file", type=Path, metavar="FILE",
                   help="require 'Authorization: Bearer <token>' (the file's content) on "
                        "every endpoint but /healthz")
    p.add_argument("--tls-cert", type=Path, metavar="PEM",
                   help="serve HTTPS with this certificate (chain); needs --tls-key (or use "
                        "--web.config.file)")
    p.add_argument("--tls-key", type=Path, metavar="PEM", help="the certificate's private key")
    limits = limits or HttpLimits()
    p.add_argument("--max-connections", type=positive_int, default=limits.max_connections,
                   help="open connections at most, TLS handshakes included, and lowered to "
                        "what the descriptor limit leaves room for; past it a new one takes "
                        "the slot of one doing no work, from the address holding the most, "
                        "and gets a 503 only when all are busy with a request "
                        f"(default {limits.max_connections})")
    p.add_argument("--idle-timeout", type=positive_float, default=limits.idle_timeout_s,
                   help="seconds a connection may sit without a complete request before it "
                        f"is closed (default {limits.idle_timeout_s:g}); a TLS handshake has "
                        f"{limits.handshake_timeout_s:g} at most")
    default_level = log_level(default_log_level)
    p.add_argument("--log.level", "--log-level", dest="log_level", type=log_level,
                   default=default_level, metavar="LEVEL",
                   help=f"debug, info, warn or error (default {default_level})")
    p.add_argument("--log.format", dest="log_format", choices=FORMATS, default=FORMATS[0],
                   help="logfmt or json (default %(default)s)")


@dataclass(frozen=True)
class Exposure:
    """What a service's app takes from the common flags: who may read it, where its
    Prometheus page is, and the headers a web config puts on every answer."""

    access: Access | None = None
    telemetry_path: str = METRICS_PATH
    headers: Mapping[str, str] = field(default_factory=dict)

    def middlewares(self) -> list[Middleware]:
        return guarded(self.access, self.headers)


@dataclass(frozen=True)
class ServiceConfig:
    """What the common flags say, checked: files read, TLS loaded, limits valid."""

    listen: Listen
    log_level: str
    limits: HttpLimits
    tls: ssl.SSLContext | None
    exposure: Exposure = field(default_factory=Exposure)
    log_format: str = FORMATS[0]

    def url(self) -> str:
        return self.listen.url("https" if self.tls else "http")


def read_token(path: Path, flag: str = "--auth-token-file") -> str:
    """The bearer token in `path`, surrounding whitespace (a final newline) removed."""
    try:
        token = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{flag}: cannot read {path}: {e}") from e
    if not token or any(c.isspace() for c in token):
        raise UsageError(f"{flag}: {path} must hold one token without spaces")
    return token


def tls_context(cert: Path | None, key: Path | None) -> ssl.SSLContext | None:
    """A server-side TLS context, loaded now so a bad file fails at startup."""
    if (cert is None) != (key is None):
        raise UsageError("--tls-cert and --tls-key go together")
    if cert is None or key is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as e:
        raise UsageError(f"--tls-cert/--tls-key: cannot load {cert}, {key}: {e}") from e
    return context


def service_config(args: argparse.Namespace) -> ServiceConfig:
    """Check the common flags of a parser built with `add_common_flags`; raises
    UsageError with a one-line message."""
    limits = HttpLimits(max_connections=args.max_connections, idle_timeout_s=args.idle_timeout)
    web_config = None
    if args.web_config_file:
        # Only then: YAML and bcrypt are 2 MiB of the Instance exporter's memory budget
        # (docs/benchmarks.md), which a host without a web config need not pay.
        from poolscope.service import webconfig

        web_config = webconfig.load(args.web_config_file)
    tls = tls_context(args.tls_cert, args.tls_key)
    if web_config is not None and web_config.tls is not None and tls is not None:
        raise UsageError("--tls-cert/--tls-key and --web.config.file's tls_server_config "
                         "both configure TLS: keep one")
    token = read_token(args.auth_token_file) if args.auth_token_file else None
    access = Access(bearer_token=token,
                    basic_users=web_config.basic_users if web_config else {},
                    open_paths=OPEN_PATHS | (web_config.open_paths if web_config else set()))
    exposure = Exposure(access if access.required else None, args.telemetry_path,
                        web_config.headers if web_config else {})
    return ServiceConfig(args.listen, args.log_level, limits,
                         tls or (web_config.tls if web_config else None), exposure,
                         args.log_format)


# --- running a service ------------------------------------------------------------

async def serve_until_stopped(app: web.Application, config: ServiceConfig, *, prog: str,
                              started: Callable[[], Awaitable[None]] | None = None) -> None:
    """Serve `app` until SIGTERM or SIGINT. `started` runs once the address is bound,
    so a service does no work when it could not listen; raises ListenError then."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with contextlib.AsyncExitStack() as stack:
        try:
            await stack.enter_async_context(serving(
                app, config.listen.host, config.listen.port, tls=config.tls,
                limits=config.limits))
        except OSError as e:
            raise ListenError(f"cannot listen on {config.url()}: {e.strerror or e}") from e
        if started is not None:
            await started()
        print(f"{prog}: serving {config.url()}", file=sys.stderr, flush=True)
        await stop.wait()


class _Configured(Protocol):
    @property
    def service(self) -> ServiceConfig: ...


ConfigT = TypeVar("ConfigT", bound=_Configured)


def command(prog: str, argv: Sequence[str] | None,
            parse: Callable[[Sequence[str] | None], ConfigT],
            serve: Callable[[ConfigT], Coroutine[Any, Any, None]]) -> int:
    """A service's console script: its flags checked (exit 2 with one line), then run."""
    try:
        config = parse(argv)
    except UsageError as e:
        return refuse(prog, e)
    return run(prog, serve(config), config.service)


def run(prog: str, service: Coroutine[Any, Any, None], config: ServiceConfig) -> int:
    """Run a service's main coroutine: 0 after SIGTERM/SIGINT, 1 when its address
    cannot be bound."""
    logs.configure(config.log_level, config.log_format)
    try:
        with contextlib.suppress(KeyboardInterrupt):  # a SIGINT before the handler is set
            asyncio.run(service)
    except ListenError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 1
    return 0
