"""An engine or gateway `/metrics` stand-in that serves fixed bytes: the real
exposition text captured in tests/fixtures/, without the engine or gateway. A
`Page` can be changed while it is served (an HTTP 500, garbage), for fault tests."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "engines"
TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"


@dataclass
class Page:
    """What every GET answers; change it while it is served."""

    body: bytes
    status: int = 200


@contextmanager
def serving(body: bytes | Page, content_type: str = TEXT_FORMAT) -> Iterator[str]:
    """Serve `body` to every GET on a free loopback port; yields the /metrics URL."""
    page = body if isinstance(body, Page) else Page(body)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, data = page.status, page.body  # one answer, even if changed meanwhile
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            """Silence per-request logging: benchmarks and tests read their own output."""

    with serving_handler(Handler) as port:
        yield f"http://127.0.0.1:{port}/metrics"


@contextmanager
def serving_handler(handler: type[BaseHTTPRequestHandler]) -> Iterator[int]:
    """`handler` answering on a free loopback port, in a thread of this process; yields
    the port. The socket is bound before the port is known, so no other process can
    take it in between."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def serving_fixture(engine: str) -> contextlib.AbstractContextManager[str]:
    """Serve tests/fixtures/engines/<engine>.txt."""
    return serving((FIXTURES / f"{engine}.txt").read_bytes())
