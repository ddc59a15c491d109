"""Every name of asyncio's and aiohttp's that Poolscope relies on and neither promises.

The connection cap needs what neither library publishes: whether an aiohttp
connection is idle, and a TLS socket it can count and close before the handshake is
done. A rename in aiohttp would not fail: its fields are read with defaults, every
connection would look busy, and the cap would quietly answer 503 where it now hands
an idle slot over. So every such name is read or subclassed through this module,
listed in `PRIVATE_NAMES` with the releases it was read in, and
tests/service/test_private_apis.py fails when one is gone, changes shape, or the
installed release is outside its range: an upgrade re-reads them before it lands.

Where a public name does the job, it is used instead: aiohttp's `keepalive_timeout`,
`lingering_time` and header limits (`AppRunner` arguments), `web.RequestHandler`
(not `aiohttp.web_protocol`), `web.Server.connections`, asyncio's `create_server`
and loop exception handler.
`loop.start_tls` would put TLS on an accepted socket without a subclass, but the
`SSLProtocol` it makes reads into a 256 KiB buffer per connection (128 MiB at the
Scheduler bridge's 512 connections), where `service.tls` sets `max_size` to 32 KiB.
"""

from __future__ import annotations

import asyncio.selector_events
from asyncio import sslproto
from dataclasses import dataclass

from aiohttp import web


@dataclass(frozen=True)
class Releases:
    """The releases of `package` a private name was read in, oldest to newest."""

    package: str
    oldest: tuple[int, ...]
    newest: tuple[int, ...]


# Python's asyncio; aiohttp from pyproject.toml's floor to the version
# constraints.txt pins for CI.
ASYNCIO = Releases("Python", (3, 11), (3, 13))
AIOHTTP = Releases("aiohttp", (3, 13, 4), (3, 14, 5))

# The TLS layer asyncio puts on a socket; `service.tls` puts it on each accepted one.
SSLProtocol = sslproto.SSLProtocol

# The loop's exception-handler message for an accept() that failed for want of
# descriptors or memory, which `listener.AcceptErrors` summarises.
ACCEPT_FAILED = "socket.accept() out of system resource"


@dataclass(frozen=True)
class PrivateName:
    """A name `owner` has that its library does not document, and what uses it."""

    owner: object
    name: str
    supported: Releases
    use: str


PRIVATE_NAMES = (
    PrivateName(sslproto, "SSLProtocol", ASYNCIO,
                "subclassed by service.tls: TLS on a socket the cap counts and can abort"),
    PrivateName(SSLProtocol, "__init__", ASYNCIO,
                "called with ssl_handshake_timeout and ssl_shutdown_timeout"),
    PrivateName(SSLProtocol, "max_size", ASYNCIO,
                "overridden: the read buffer __init__ allocates per connection"),
    PrivateName(SSLProtocol, "connection_made", ASYNCIO,
                "overridden: the cap admits the socket before the handshake starts"),
    PrivateName(SSLProtocol, "connection_lost", ASYNCIO,
                "overridden: the cap forgets the socket"),
    PrivateName(asyncio.selector_events.BaseSelectorEventLoop, "_accept_connection",
                ASYNCIO, "reports ACCEPT_FAILED, the message AcceptErrors matches"),
    PrivateName(web.RequestHandler, "_waiter", AIOHTTP,
                "idle_since: set while the connection waits for a request head"),
    PrivateName(web.RequestHandler, "_request_count", AIOHTTP,
                "idle_since: 0 before the first request head"),
    PrivateName(web.RequestHandler, "_messages", AIOHTTP,
                "idle_since: request heads parsed and not yet handled"),
    PrivateName(web.RequestHandler, "_next_keepalive_close_time", AIOHTTP,
                "idle_since: the keep-alive deadline, smaller the longer idle"),
)


def idle_since(handler: web.RequestHandler) -> float | None:
    """A key that is smaller the longer the open connection `handler` has been idle
    (its keep-alive deadline); None while a request is on it.

    Read where aiohttp's own keep-alive timer reads it. A connection is idle while
    it waits for its next request head, or before its first one has arrived; once a
    request has been parsed, it is busy until aiohttp waits again. Should aiohttp
    rename these, every connection reads as busy, which is the plain cap:
    over-cap clients get the 503.
    """
    waiter = getattr(handler, "_waiter", None)
    waiting = waiter is not None and not waiter.done()
    unstarted = (waiter is None and getattr(handler, "_request_count", 1) == 0
                 and not getattr(handler, "_messages", True))
    since = getattr(handler, "_next_keepalive_close_time", None)
    return since if (waiting or unstarted) and isinstance(since, float) else None

