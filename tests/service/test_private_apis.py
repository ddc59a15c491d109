"""The asyncio and aiohttp names the listener relies on and neither library promises
(`service.internals.PRIVATE_NAMES`) are still there, in the shape it uses them.

The listener would not fail without them: it reads them with defaults, and the
connection cap would quietly stop handing idle slots over. These tests are the
alarm instead, and they fail on a release outside the range the names were read
in, so an upgrade re-reads them first.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import inspect
import ssl
import sys

import pytest
from aiohttp import web
from packaging.version import Version

from harness.polling import until
from poolscope.service.internals import (
    ACCEPT_FAILED,
    PRIVATE_NAMES,
    PrivateName,
    Releases,
    SSLProtocol,
    idle_since,
)
from poolscope.service.tls import TlsSocket


def installed(releases: Releases) -> tuple[int, ...]:
    if releases.package == "Python":
        return tuple(sys.version_info[:len(releases.newest)])
    return Version(importlib.metadata.version(releases.package)).release


@pytest.mark.parametrize("releases", sorted({n.supported for n in PRIVATE_NAMES},
                                            key=lambda r: r.package), ids=str)
def test_the_installed_release_is_one_the_names_were_read_in(releases: Releases) -> None:
    assert releases.oldest <= installed(releases) <= releases.newest, (
        f"{releases.package} {installed(releases)}: re-read PRIVATE_NAMES in "
        "service/internals.py for this release, then widen its range")


@pytest.mark.parametrize("private", PRIVATE_NAMES, ids=lambda n: n.name)
def test_every_private_name_is_still_there(private: PrivateName) -> None:
    assert hasattr(private.owner, private.name), f"{private.name} is gone: {private.use}"


def test_the_tls_layer_is_built_and_overridden_as_asyncio_defines_it() -> None:
    built = inspect.signature(SSLProtocol.__init__).parameters
    assert list(built)[:5] == ["self", "loop", "app_protocol", "sslcontext", "waiter"]
    assert {"server_side", "ssl_handshake_timeout", "ssl_shutdown_timeout"} <= set(built)
    # The buffer is allocated at construction, from the class attribute TlsSocket sets.
    assert isinstance(SSLProtocol.max_size, int)
    assert "self.max_size" in inspect.getsource(SSLProtocol.__init__)
    for method in ("connection_made", "connection_lost"):
        assert method in vars(SSLProtocol), f"SSLProtocol inherits {method}: nothing to extend"
        assert (inspect.signature(getattr(SSLProtocol, method)).parameters.keys()
                == inspect.signature(getattr(TlsSocket, method)).parameters.keys())


async def test_the_names_tls_socket_adds_are_not_asyncios() -> None:
    """An attribute of SSLProtocol's own with one of these names would be overwritten
    without an error."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    theirs = SSLProtocol(asyncio.get_running_loop(), asyncio.Protocol(), context, None,
                         server_side=True)
    ours = TlsSocket(asyncio.Protocol(), context, 1.0, admission=None)  # type: ignore[arg-type]
    assert set(vars(ours)) - set(vars(theirs)) == {"app", "accepted", "socket", "_admission"}
    assert not {"app", "accepted", "socket", "_admission"} & set(dir(SSLProtocol))


def test_asyncio_reports_a_failed_accept_with_the_message_accept_errors_matches() -> None:
    source = inspect.getsource(asyncio.selector_events.BaseSelectorEventLoop._accept_connection)
    assert repr(ACCEPT_FAILED) in source


async def test_idle_since_tells_an_idle_connection_from_a_busy_one() -> None:
    """On aiohttp's real server: idle before the first request and between requests
    (keyed by the keep-alive deadline), busy while a request is at work."""
    entered, release = asyncio.Event(), asyncio.Event()

    async def slow(request: web.BaseRequest) -> web.Response:
        entered.set()
        await release.wait()
        return web.Response(text="done")

    keepalive_s = 30.0
    server = web.Server(slow, keepalive_timeout=keepalive_s)
    loop = asyncio.get_running_loop()
    listener = await loop.create_server(server, "127.0.0.1", 0)
    reader, writer = await asyncio.open_connection(*listener.sockets[0].getsockname()[:2])
    try:
        handlers = await until(lambda: server.connections, bool, "the connection accepted")
        connection = handlers[0]

        since = await until(lambda: idle_since(connection), lambda s: s is not None,
                            "idle before the first request")
        assert loop.time() < since <= loop.time() + keepalive_s

        writer.write(b"GET / HTTP/1.1\r\nHost: pin\r\n\r\n")
        await entered.wait()
        assert idle_since(connection) is None  # busy while the request is at work

        release.set()
        assert (await reader.readuntil(b"done")).startswith(b"HTTP/1.1 200")
        await until(lambda: idle_since(connection), lambda s: s is not None,
                    "idle again once answered")
    finally:
        writer.close()
        listener.close()
        await server.shutdown(1.0)
