"""How many connections a listener holds, and which one gives its slot up at the cap.

Every connection holds a descriptor, and a process out of descriptors stops
accepting: a flood of sockets that send nothing, or never finish a TLS handshake,
would lock out the scrapers. So the cap counts every connection from the accept
and, at the cap, closes one doing no work rather than refuse one that has some.
The cap's size is what the descriptor limit leaves room for (`descriptor_budget`).
"""

from __future__ import annotations

import array
import asyncio
import collections
import fcntl
import itertools
import os
import resource
import ssl
import termios
from collections.abc import Iterator
from dataclasses import dataclass

from aiohttp import web

from poolscope.service import auth
from poolscope.service.internals import idle_since
from poolscope.service.tls import TlsSocket

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


def _closing(handler: web.RequestHandler) -> bool:
    return handler.transport is None or handler.transport.is_closing()


def _has_unread_bytes(handler: web.RequestHandler) -> bool:
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


class ConnectionCap:
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
        self._sockets: dict[asyncio.BaseProtocol, TlsSocket] = {}
        # Closing connections whose slot a new one has taken: a connection is
        # gone a loop turn after it starts closing, so its slot is free now, but
        # only once, or a burst of new connections would pass the cap.
        self._handed_over: set[asyncio.BaseProtocol] = set()

    def __call__(self) -> asyncio.BaseProtocol:
        if self._tls is not None:
            return TlsSocket(self._server(), self._tls, self._handshake_timeout_s, self)
        handler = self._server()
        return handler if self._make_room(handler, None) else _Busy()

    def admit(self, tls: TlsSocket) -> bool:
        """Count a TLS socket from now; False when it is the one to close."""
        self._sockets[tls.app] = tls
        return self._make_room(tls.app, tls)

    def forget(self, tls: TlsSocket) -> None:
        self._sockets.pop(tls.app, None)

    def _make_room(self, arriving: asyncio.BaseProtocol, tls: TlsSocket | None) -> bool:
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
        elif isinstance(connection, web.RequestHandler) and not _closing(connection):
            connection.force_close()

    def _freeable(self, live: set[asyncio.BaseProtocol], handlers: set[asyncio.BaseProtocol],
                  arriving: TlsSocket | None) -> Iterator[asyncio.BaseProtocol]:
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
               arriving: TlsSocket | None) -> tuple[int, float] | None:
        """What `connection` is doing, and since when, if that is no work; None when
        it has a request at work (or is a plain one just accepted)."""
        if connection not in handlers:
            tls = self._sockets.get(connection)
            if tls is None:
                return None
            return (_ARRIVING, tls.accepted) if tls is arriving else (_HANDSHAKING, tls.accepted)
        assert isinstance(connection, web.RequestHandler)
        checking = auth.waiting_since(connection)
        if checking is not None:
            return _CHECKING, checking
        idle = None if _closing(connection) else idle_since(connection)
        return None if idle is None or _has_unread_bytes(connection) else (_IDLE, idle)

    def _is_closing(self, connection: asyncio.BaseProtocol,
                    handlers: set[asyncio.BaseProtocol]) -> bool:
        tls = self._sockets.get(connection)
        if tls is not None and tls.socket is not None and tls.socket.is_closing():
            return True
        # A handler has no transport of its own before aiohttp has it (for TLS, before
        # the handshake is done): that is not closing.
        return (isinstance(connection, web.RequestHandler) and connection in handlers
                and _closing(connection))

    def _peer(self, connection: asyncio.BaseProtocol) -> str:
        tls = self._sockets.get(connection)
        transport = tls.socket if tls is not None else getattr(connection, "transport", None)
        peer = transport.get_extra_info("peername") if transport is not None else None
        return str(peer[0]) if isinstance(peer, tuple) else ""
