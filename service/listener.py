"""The listener every service serves on, so each faces a flood the same way.

More than Prometheus may reach a service, so what one client can hold or send is
bounded (`HttpLimits`), the connections are capped below the descriptor limit
(`service.connection_cap`), TLS goes on each accepted socket (`service.tls`), and
a flood past the descriptor limit writes one log line, not a traceback per accept()
(`AcceptErrors`). `serving` puts these together around an aiohttp application.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from poolscope.service.connection_cap import DESCRIPTOR_RESERVE, ConnectionCap, descriptor_budget
from poolscope.service.internals import ACCEPT_FAILED

ExceptionHandler = Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object]


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


# asyncio gives listen() the accept burst's `backlog` (`descriptor_budget`) too; the
# kernel's queue is then set longer, since connections waiting there hold no
# descriptor. A flood of a few thousand sockets then waits its turn there with the
# scrapers, where a short queue would drop their SYNs and cost each a retransmit a
# second later (Linux caps this at net.core.somaxconn, 4096 by default).
LISTEN_QUEUE = 4096

_log = logging.getLogger(__name__)


class AcceptErrors:
    """The loop's exception handler while serving: "socket.accept() out of system
    resource" (descriptors or memory exhausted) becomes one warning line per
    `every_s` seconds with a count, not a traceback per try.

    asyncio retries the accept a second later, but its loop goes on trying the
    rest of the backlog first and reports each failure, so a flood past the
    descriptor limit used to write megabytes of identical tracebacks a second.
    Everything else goes to the handler there was before.
    """

    def __init__(self, previous: ExceptionHandler | None, every_s: float = 10.0) -> None:
        self._previous = previous
        self._every_s = every_s
        self._last: float | None = None
        self._unreported = 0

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") != ACCEPT_FAILED:
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
        cap = ConnectionCap(runner.server, budget.connections, tls,
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

