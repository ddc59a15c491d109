"""A hostile client for the TLS tests, run as its own process so its CPU and its
descriptors are not the test's: `python -m tests.reliability.tls_flood MODE HOST:PORT`.

`handshake`: sockets that open a TCP connection, send the first bytes of a TLS
record and never finish the handshake. `password`: TLS clients sending basic-auth
requests with a new wrong password each time. Every socket reconnects as soon as
the server lets it go, so the flood stays as large as asked. It prints `flooding`
once every socket has connected or been refused at least once (or 20 s have
passed) and, in `password` mode, the server has checked one of its wrong passwords
(a 401: the flood has its bcrypt thread, which is what a test under it needs), or
`not flooding` and its counters when no 401 came within 60 s. On SIGTERM it prints
one JSON line: connections made, attempts, and answers by status (0: none, the
connection closed or refused first).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import contextlib
import itertools
import json
import signal
import ssl
import sys
from collections.abc import Callable

# A TLS record header for a ClientHello, and nothing after it.
_PARTIAL_HELLO = b"\x16\x03\x01\x02\x00"
_guesses = itertools.count()
# Made once: loading the CA store for each connection would spend the flood's CPU.
_CLIENT = ssl.create_default_context()
_CLIENT.check_hostname, _CLIENT.verify_mode = False, ssl.CERT_NONE


async def _handshake(host: str, port: int, source: str, connected: Callable[[], None]) -> int:
    reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
    connected()
    try:
        writer.write(_PARTIAL_HELLO)
        await reader.read()  # until the server hangs up
    finally:
        writer.close()
    return 0


async def _password(host: str, port: int, source: str, connected: Callable[[], None]) -> int:
    reader, writer = await asyncio.open_connection(host, port, ssl=_CLIENT,
                                                   local_addr=(source, 0))
    connected()
    try:
        token = base64.b64encode(f"prometheus:guess-{next(_guesses)}".encode()).decode()
        writer.write(f"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {token}\r\n"
                     "\r\n".encode())
        status = (await reader.readline()).split()
        return int(status[1]) if len(status) > 1 else 0
    finally:
        writer.close()


async def _flood(mode: str, host: str, port: int, source: str, sockets: int) -> None:
    connect = _handshake if mode == "handshake" else _password
    seen: collections.Counter[str] = collections.Counter()
    started: set[int] = set()
    ready = asyncio.Event()
    checked = asyncio.Event()

    async def hold(i: int) -> None:
        def connected() -> None:
            seen["connections"] += 1
            tried(i)

        while True:
            try:
                status = await connect(host, port, source, connected)
            except (OSError, ValueError, IndexError):  # ssl.SSLError is an OSError
                status = 0
            seen["attempts"] += 1
            seen[str(status)] += 1
            if status == 401:
                checked.set()
            tried(i)

    def tried(i: int) -> None:
        started.add(i)
        if len(started) == sockets:
            ready.set()

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    tasks = [asyncio.create_task(hold(i)) for i in range(sockets)]
    # Some may wait in the server's listen queue: flooding all the same.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(ready.wait(), 20)
    try:
        if mode == "password":
            await asyncio.wait_for(checked.wait(), 60)
        print("flooding", flush=True)
    except TimeoutError:
        print(f"not flooding: {json.dumps(dict(seen))}", flush=True)
    await stop.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    print(json.dumps(dict(seen)), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(prog="tls_flood")
    parser.add_argument("mode", choices=("handshake", "password"))
    parser.add_argument("target", help="HOST:PORT")
    parser.add_argument("--sockets", type=int, default=300)
    parser.add_argument("--source", default="127.0.0.1", help="the flood's own address")
    args = parser.parse_args()
    host, _, port = args.target.rpartition(":")
    asyncio.run(_flood(args.mode, host, int(port), args.source, args.sockets))
    return 0


if __name__ == "__main__":
    sys.exit(main())
