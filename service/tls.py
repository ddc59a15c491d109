"""TLS put on each accepted socket, so the connection cap counts a handshake too.

With `create_server(ssl=...)`, asyncio hands aiohttp its connection only once the
handshake is done, so the cap never saw a handshake in progress: sockets that never
finish one held a descriptor each, uncounted, until the process ran out. The
listener serves plain TCP and puts TLS on each socket here instead, with the class
asyncio uses inside for the same job (`service.internals` lists what that relies on).
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Protocol

from poolscope.service.internals import SSLProtocol


class Admission(Protocol):
    """What counts TLS sockets from the accept to the close: the connection cap."""

    def admit(self, tls: TlsSocket) -> bool: ...

    def forget(self, tls: TlsSocket) -> None: ...


class TlsSocket(SSLProtocol):
    """TLS on one accepted socket, known to `admission` from the accept until the
    socket is closed; aborted at once when `admission` refuses it."""

    # asyncio reads 256 KiB at a time, a buffer per connection; a request head fits
    # in 8 KiB and a TLS record in 16 KiB.
    max_size = 32 * 1024

    def __init__(self, app: asyncio.Protocol, context: ssl.SSLContext, timeout_s: float,
                 admission: Admission) -> None:
        loop = asyncio.get_running_loop()
        super().__init__(loop, app, context, None, server_side=True,
                         ssl_handshake_timeout=timeout_s, ssl_shutdown_timeout=timeout_s)
        self.app = app  # SSLProtocol forgets its own at the close
        self.accepted = loop.time()
        self.socket: asyncio.Transport | None = None
        self._admission = admission

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.socket = transport
        admitted = self._admission.admit(self)
        super().connection_made(transport)
        if not admitted:
            transport.abort()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._admission.forget(self)
        super().connection_lost(exc)
