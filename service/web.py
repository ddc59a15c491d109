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
import contextlib
import fcntl
import itertools
import re
import signal
import ssl
import sys
import termios
import time
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

from poolscope.service import logs
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
    max_header_bytes: int = 8190  # one request line or header field
    max_headers: int = 64
    # How long an unread (refused) body is drained so the client sees the 413
    # rather than a reset; aiohttp's 10 s default would let a declared-but-unsent
    # body hold the connection that long.
    linger_s: float = 1.0

    def __post_init__(self) -> None:
        if self.max_connections < 1 or self.max_header_bytes < 1 or self.max_headers < 1:
            raise ValueError("HTTP limits must be positive")
        if not self.idle_timeout_s > 0 or not self.linger_s >= 0:
            raise ValueError("idle timeout must be positive, linger time not negative")


_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
         b"Content-Length: 22\r\nConnection: close\r\n\r\ntoo many connections\r\n")


class _Busy(asyncio.Protocol):
    """Answers a connection over the cap with a 503 and closes it, so the client
    learns why instead of seeing a reset."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        transport.write(_BUSY)
        transport.close()


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


class _ConnectionCap:
    """Protocol factory in front of aiohttp's: at most `limit` live connections,
    counted as aiohttp makes them (a loop turn after the accept, so one turn's burst
    of accepts can pass the cap; the next new connections bring it back).

    A connection keeps its slot only while it does work. At the cap a new one
    takes the slot of the connection idle longest (a keep-alive between requests,
    or one that has not sent a whole request head), as nginx reuses its idle
    keep-alive connections when worker_connections run short: otherwise sockets
    that send nothing, or a health check every 20 s, hold every slot for the idle
    timeout and lock out the clients with work. A server may close an idle
    keep-alive connection at any time; clients retry an idempotent request on a
    new one. Only when every slot has a request on it is the new connection
    answered 503.
    """

    def __init__(self, server: web.Server, limit: int) -> None:
        self._server = server
        self._limit = limit
        # Closing connections whose slot a new one has taken: a connection is
        # gone a loop turn after it starts closing, so its slot is free now, but
        # only once, or a burst of new connections would pass the cap.
        self._handed_over: set[RequestHandler] = set()

    def __call__(self) -> asyncio.BaseProtocol:
        connections = self._server.connections
        self._handed_over.intersection_update(connections)
        # More than one slot to free when a burst of accepts, all made in the same
        # loop turn, went past the cap: each new connection then brings it back.
        excess = len(connections) - len(self._handed_over) - self._limit + 1
        if excess > 0:
            freed = list(itertools.islice(self._freeable(connections), excess))
            if not freed:
                return _Busy()
            for handler in freed:
                if not _closing(handler):
                    handler.force_close()
                self._handed_over.add(handler)
        return self._server()

    def _freeable(self, connections: list[RequestHandler]) -> Iterator[RequestHandler]:
        """Slots to hand over, cheapest first: connections already closing, then
        idle ones, longest idle first."""
        yield from (h for h in connections if _closing(h) and h not in self._handed_over)
        idle = [(since, h) for h in connections if (since := _idle_since(h)) is not None]
        idle.sort(key=lambda pair: pair[0])
        yield from (h for _, h in idle if not _has_unread_bytes(h))


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
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=limits.idle_timeout_s,
                           max_line_size=limits.max_header_bytes,
                           max_field_size=limits.max_header_bytes,
                           max_headers=limits.max_headers, lingering_time=limits.linger_s)
    await runner.setup()
    try:
        assert runner.server is not None  # set by setup()
        server = await asyncio.get_running_loop().create_server(
            _ConnectionCap(runner.server, limits.max_connections), host, port, ssl=tls,
            ssl_handshake_timeout=limits.idle_timeout_s if tls else None)
        try:
            bound = server.sockets[0].getsockname()
            yield str(bound[0]), int(bound[1])
        finally:
            server.close()
    finally:
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
                   help="open connections at most; past it a new one takes the slot of the "
                        "longest idle, and gets a 503 only when all are busy with a request "
                        f"(default {limits.max_connections})")
    p.add_argument("--idle-timeout", type=positive_float, default=limits.idle_timeout_s,
                   help="seconds a connection may sit without a complete request before it "
                        f"is closed (default {limits.idle_timeout_s:g})")
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
