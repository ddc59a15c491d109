"""HTTP: /metrics for Prometheus, /healthz and /v1/resource/snapshot for the
Resource Agent's existing consumers (seed 001).

Every handler reads held samples only; none of them waits on a device.

The exporter may face more than Prometheus (issue 9), so what one client can
hold or send is bounded: a request head has size limits, a request body is
refused (no endpoint takes one), a connection that has not finished a request
within the idle timeout is closed (slow clients cannot pin sockets), and past
`max_connections` a new connection gets a 503 and is closed instead of
competing with the scrapes already being served. Optional bearer-token auth
covers everything but /healthz, which liveness probes must reach without a
secret; TLS wraps the whole listener.
"""

from __future__ import annotations

import asyncio
import hmac
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from exporters.instance import snapshot
from exporters.instance.service import InstanceExporter

EXPORTER_KEY: web.AppKey[InstanceExporter] = web.AppKey("exporter", InstanceExporter)
_REGISTRY_KEY: web.AppKey[CollectorRegistry] = web.AppKey("registry", CollectorRegistry)
UNAUTHENTICATED = frozenset({"/healthz"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


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


async def _metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[_REGISTRY_KEY])
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _healthz(request: web.Request) -> web.Response:
    exporter = request.app[EXPORTER_KEY]
    return web.json_response({"status": "ok", "instance_id": exporter.settings.instance_id})


async def _snapshot(request: web.Request) -> web.Response:
    return web.json_response(snapshot.build(request.app[EXPORTER_KEY]), dumps=snapshot.dumps)


@web.middleware
async def _no_body(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every endpoint is a GET without a body; one that comes anyway is not read."""
    if request.body_exists:
        return web.json_response({"error": "this API takes no request body"}, status=413)
    return await handler(request)


def _bearer_auth(token: str) -> Middleware:
    expected = f"Bearer {token}".encode()

    @web.middleware
    async def bearer_auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in UNAUTHENTICATED:
            return await handler(request)
        given = request.headers.get("Authorization", "").encode()
        if not hmac.compare_digest(given, expected):  # constant time: no token oracle
            return web.json_response(
                {"error": "missing or wrong bearer token"}, status=401,
                headers={"WWW-Authenticate": 'Bearer realm="poolscope"'})
        return await handler(request)
    return bearer_auth


def make_app(exporter: InstanceExporter, auth_token: str | None = None) -> web.Application:
    middlewares = [_no_body] + ([_bearer_auth(auth_token)] if auth_token else [])
    app = web.Application(middlewares=middlewares)
    app[EXPORTER_KEY] = exporter
    app[_REGISTRY_KEY] = exporter.registry()
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/v1/resource/snapshot", _snapshot)
    return app


_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
         b"Content-Length: 22\r\nConnection: close\r\n\r\ntoo many connections\r\n")


class _Busy(asyncio.Protocol):
    """Answers a connection over the cap with a 503 and closes it, so the client
    learns why instead of seeing a reset."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        transport.write(_BUSY)
        transport.close()


class _ConnectionCap:
    """Protocol factory in front of aiohttp's: at most `limit` live connections."""

    def __init__(self, server: web.Server, limit: int) -> None:
        self._server = server
        self._limit = limit

    def __call__(self) -> asyncio.BaseProtocol:
        if len(self._server.connections) >= self._limit:
            return _Busy()
        return self._server()


@asynccontextmanager
async def serving(app: web.Application, host: str, port: int, *,
                  tls: ssl.SSLContext | None = None,
                  limits: HttpLimits | None = None) -> AsyncIterator[tuple[str, int]]:
    """Listen on host:port (0: any free port) until the block ends; yields the bound
    address. Raises OSError when the address cannot be bound."""
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
