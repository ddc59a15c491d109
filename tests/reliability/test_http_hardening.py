"""What one client can do to the HTTP surfaces: oversized or bodied requests, too
many connections, slowloris-style partial requests, and who may read at all
(bearer token, TLS with a real certificate made here by openssl).

The Instance exporter is tested in-process through `serving()`, and as a process
through its flags; both bridges as processes through the same flags.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import logging
import re
import resource
import socket
import ssl
import subprocess
import sys
import urllib.error
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from aiohttp import web

from deploy.demo.processes import port_or_free, stop_group
from harness.fake_gpus import three_gpus
from harness.polling import eventually, until
from harness.prometheus import running_prometheus
from poolscope.exporters.instance.config import parse
from poolscope.exporters.instance.server import make_app
from poolscope.exporters.instance.service import InstanceExporter, Settings
from poolscope.service.argtypes import UsageError
from poolscope.service.auth import Access
from poolscope.service.listener import HttpLimits, serving
from poolscope.service.middleware import guarded
from poolscope.service.web import Exposure
from tests.reliability.stack import fetch, self_signed_certificate

TOKEN = "s3cret-t0ken"
ADDRESS = tuple[str, int]


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed_certificate(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return path


@contextlib.asynccontextmanager
async def exporter_at(limits: HttpLimits, token: str | None = None) -> AsyncIterator[ADDRESS]:
    exporter = InstanceExporter(Settings(instance_id="i-1", proxy_id="p-1"),
                                nvml=three_gpus().module())
    await exporter.loop.sample_all()
    try:
        exposure = Exposure(Access(bearer_token=token) if token else None)
        async with serving(make_app(exporter, exposure), "127.0.0.1", 0, limits=limits) as address:
            yield address
    finally:
        await exporter.stop()


async def exchange(address: ADDRESS, request: bytes) -> bytes:
    """Send raw bytes, return the status line (b"" when the server just closed)."""
    reader, writer = await asyncio.open_connection(*address)
    try:
        writer.write(request)
        await writer.drain()
        return (await asyncio.wait_for(reader.readline(), 10)).rstrip()
    finally:
        writer.close()


def status_of(line: bytes) -> int:
    return int(line.split()[1])


def get_request(path: str, token: str | None = None) -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return f"GET {path} HTTP/1.1\r\nHost: x\r\n{auth}\r\n".encode()


async def read_response(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One whole response off a kept-alive connection: its head and its body."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    length = re.search(rb"\r\ncontent-length: *(\d+)", head, re.IGNORECASE)
    assert length is not None, head
    return head, await asyncio.wait_for(reader.readexactly(int(length[1])), 10)


async def status_or_0(address: ADDRESS, request: bytes) -> int:
    """The answer's status; 0 for a connection closed or reset without one."""
    try:
        line = await exchange(address, request)
    except ConnectionError:
        return 0
    return status_of(line) if line else 0


# --- request size ------------------------------------------------------------

@pytest.mark.parametrize("request_bytes", [
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 104857600\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"POST /v1/resource/snapshot HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
], ids=["declared-100MiB", "chunked", "small-post"])
async def test_exporter_refuses_request_bodies_without_reading_them(request_bytes: bytes) -> None:
    async with exporter_at(HttpLimits()) as address:
        line = await exchange(address, request_bytes)
    assert status_of(line) in (405, 413), line  # POST has no route: 405 before the body


@pytest.mark.parametrize("request_bytes", [
    b"GET /metrics?" + b"a" * 1_000_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(100)) + b"\r\n",
], ids=["megabyte-url", "20k-header", "100-headers"])
async def test_exporter_refuses_oversized_request_heads(request_bytes: bytes) -> None:
    async with exporter_at(HttpLimits(max_headers=64)) as address:
        line = await exchange(address, request_bytes)
        assert 400 <= status_of(line) < 500, line
        ok = await exchange(address, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status_of(ok) == 200


# --- connections -------------------------------------------------------------

async def test_a_cap_held_by_requests_in_progress_answers_503_then_recovers() -> None:
    release = asyncio.Event()
    in_progress = 0

    async def slow(_: web.Request) -> web.Response:
        nonlocal in_progress
        in_progress += 1
        await release.wait()
        return web.json_response({})

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = web.Application(middlewares=guarded(None))
    app.router.add_get("/slow", slow)
    app.router.add_get("/healthz", healthz)
    async with serving(app, "127.0.0.1", 0, limits=HttpLimits(max_connections=4)) as address:
        held = [await asyncio.open_connection(*address) for _ in range(4)]
        for _, writer in held:
            writer.write(get_request("/slow"))
        await until(lambda: in_progress, lambda n: n == 4, "4 requests in progress")
        # No slot is idle, so none can be given up: the new connection is refused.
        assert status_of(await exchange(address, get_request("/healthz"))) == 503
        release.set()
        for reader, _ in held:
            assert status_of(await asyncio.wait_for(reader.readline(), 10)) == 200
        for _, writer in held:
            writer.close()
        await until(lambda: status_or_0(address, get_request("/healthz")), lambda s: s == 200,
                    "a new connection answered once the held ones closed")


async def test_idle_keep_alive_connections_give_up_their_slots_longest_idle_first() -> None:
    async with exporter_at(HttpLimits(max_connections=4)) as address:
        async def kept_alive() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            reader, writer = await asyncio.open_connection(*address)
            writer.write(get_request("/healthz"))
            head, _ = await read_response(reader)
            assert status_of(head.split(b"\r\n")[0]) == 200
            return reader, writer

        old = [await kept_alive() for _ in range(4)]  # the cap, every one idle
        new = [await kept_alive() for _ in range(3)]  # each evicts the longest idle
        # The three that were idle longest were closed; the fourth is still served.
        assert [await asyncio.wait_for(reader.read(), 10) for reader, _ in old[:3]] == [b""] * 3
        reader, writer = old[3]
        writer.write(get_request("/healthz"))
        assert (await read_response(reader))[0].startswith(b"HTTP/1.1 200 ")
        for _, writer in old + new:
            writer.close()


async def test_a_new_tls_client_takes_an_idle_keep_alive_slot_at_the_cap(
        certificate: tuple[Path, Path]) -> None:
    """Four clients on four addresses hold the cap with idle keep-alives; a fifth, from
    an address of its own, is served over TLS by taking the longest idle slot, not
    refused because its handshake sorted first."""
    cert, key = certificate
    server_side = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_side.load_cert_chain(str(cert), str(key))
    client_side = ssl.create_default_context(cafile=str(cert))
    client_side.check_hostname = False
    exporter = InstanceExporter(Settings(instance_id="i-1", proxy_id="p-1"),
                                nvml=three_gpus().module())
    await exporter.loop.sample_all()
    try:
        async with serving(make_app(exporter, Exposure()), "127.0.0.1", 0, tls=server_side,
                           limits=HttpLimits(max_connections=4)) as (host, port):
            async def kept_alive(n: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
                reader, writer = await asyncio.open_connection(
                    host, port, ssl=client_side, local_addr=(f"127.0.0.{n}", 0))
                writer.write(get_request("/healthz"))
                head, _ = await read_response(reader)
                assert status_of(head.split(b"\r\n")[0]) == 200, n
                return reader, writer

            held = [await kept_alive(n) for n in range(2, 6)]  # the cap, each idle
            _, writer = await kept_alive(6)  # served: it took a slot
            writer.close()
            # The longest idle, 127.0.0.2, gave its slot up.
            assert await asyncio.wait_for(held[0][0].read(), 10) == b""
            for _, writer in held:
                writer.close()
    finally:
        await exporter.stop()


class Flood:
    """Sockets that hold a connection each and never authenticate: some silent,
    some sending an unauthenticated /healthz, every one reconnecting as soon as
    the server lets it go (a 503, an eviction, or `Connection: close`)."""

    def __init__(self, address: ADDRESS, sockets: int) -> None:
        self.address = address
        self.connects = 0
        self.tasks = [asyncio.create_task(self._hold(i % 2 == 1)) for i in range(sockets)]

    async def _hold(self, probe: bool) -> None:
        while True:
            try:
                reader, writer = await asyncio.open_connection(*self.address)
            except OSError:
                continue
            self.connects += 1
            try:
                if probe:
                    writer.write(get_request("/healthz"))
                await reader.read()  # whatever comes, until the server hangs up
            except OSError:
                pass
            finally:
                writer.close()

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def test_an_idle_unauthenticated_flood_past_the_cap_does_not_lock_out_a_client() -> None:
    cap, flood_size, requests = 16, 64, 50
    async with exporter_at(HttpLimits(max_connections=cap), token=TOKEN) as address:
        flood = Flood(address, flood_size)
        try:
            before = await until(lambda: flood.connects, lambda n: n >= flood_size,
                                 "every flood socket connected")
            statuses = [await status_or_0(address, get_request("/metrics", TOKEN))
                        for _ in range(requests)]
            during = flood.connects - before
        finally:
            await flood.stop()
    assert statuses.count(200) >= 0.95 * requests, statuses
    assert during > flood_size  # the flood kept coming while the client was served


async def test_exporter_closes_slowloris_connections_and_keeps_serving() -> None:
    async with exporter_at(HttpLimits(max_connections=64, idle_timeout_s=1.0)) as address:
        slow = [await asyncio.open_connection(*address) for _ in range(30)]
        for i, (_, writer) in enumerate(slow):
            writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow-%d: " % i)
        ok = await exchange(address, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status_of(ok) == 200  # while all 30 hold a half-sent request
        for _, writer in slow:
            writer.write(b"a")  # trickling bytes does not buy more time
        # The server hangs up on each (EOF), well within a few idle timeouts.
        closed = await asyncio.wait_for(
            asyncio.gather(*(_until_hung_up(reader) for reader, _ in slow)), timeout=10)
        assert all(b"200" not in c for c in closed)
        for _, writer in slow:
            writer.close()


async def _until_hung_up(reader: asyncio.StreamReader) -> bytes:
    """What the server sent before it closed. A trickled byte that meets the close
    turns it into a reset: a hang-up all the same."""
    try:
        return await reader.read()
    except ConnectionResetError:
        return b""


def _limited_process(argv: list[str], log: Path, nofile: int) -> subprocess.Popen[bytes]:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", *argv], stdout=out,
                                stderr=subprocess.STDOUT, preexec_fn=limit,
                                start_new_session=True)


def survives_a_connection_flood(url: str, host: str, port: int) -> bool:
    """Hold up to 300 half-sent requests against a process with few descriptors;
    True when /healthz still answers 200 within 10 s while the flood is held."""
    flood: list[socket.socket] = []
    try:
        for _ in range(300):
            try:
                s = socket.create_connection((host, port), timeout=0.5)
            except OSError:
                break  # the listen backlog is full: the flood is as big as it gets
            flood.append(s)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        try:
            eventually(lambda: _healthz(url), lambda s: s == 200, 10, "healthz during a flood")
        except AssertionError:
            return False
        return True
    finally:
        for s in flood:
            s.close()


def _healthz(url: str) -> int:
    try:
        return fetch(f"{url}/healthz", timeout=2)[0]
    except (OSError, http.client.HTTPException):
        return 0


def assert_survives_a_flood(argv: list[str], log: Path, nofile: int) -> None:
    """Start `python -m *argv` with a small connection cap and idle timeout under
    `nofile` descriptors; it must answer /healthz through a flood and keep running."""
    port = port_or_free(0)
    proc = _limited_process([*argv, "--listen", f"127.0.0.1:{port}", "--max-connections",
                             "32", "--idle-timeout", "2"], log, nofile=nofile)
    try:
        url = f"http://127.0.0.1:{port}"
        eventually(lambda: _healthz(url), lambda s: s == 200, 30, f"{argv[0]} up")
        assert survives_a_connection_flood(url, "127.0.0.1", port)
        assert proc.poll() is None
    finally:
        stop_group(proc)


def test_exporter_process_survives_a_connection_flood_under_a_small_fd_limit(
        tmp_path: Path) -> None:
    log = tmp_path / "exporter.log"
    # A burst may briefly exhaust descriptors (asyncio logs EMFILE and retries): what
    # must hold is that the exporter keeps answering, checked inside.
    assert_survives_a_flood(
        ["poolscope.exporters.instance", "--instance-id", "i", "--proxy-id", "p"],
        log, nofile=256)


@pytest.mark.parametrize("argv", [
    ["poolscope.scheduler_bridge"],
    ["poolscope.proxy_bridge", "--proxy-id", "hp_127.0.0.1:8001"],
], ids=["scheduler", "proxy"])
def test_bridge_survives_a_connection_flood_under_a_small_fd_limit(
        tmp_path: Path, argv: list[str]) -> None:
    # 128 descriptors: a burst of accepts may briefly exhaust them (asyncio retries
    # accept a second later); what matters is that the held connections are capped
    # and expire, so accept() recovers while the flood is still held.
    assert_survives_a_flood([*argv, "--prometheus-url", "http://127.0.0.1:9"],
                            tmp_path / "bridge.log", nofile=128)


# --- bearer token and TLS ----------------------------------------------------

async def test_exporter_token_guards_everything_but_healthz() -> None:
    async with exporter_at(HttpLimits(), token=TOKEN) as address:
        async def get(path: str, auth: str | None) -> int:
            header = f"Authorization: {auth}\r\n".encode() if auth else b""
            return status_of(await exchange(
                address, f"GET {path} HTTP/1.1\r\nHost: x\r\n".encode() + header + b"\r\n"))

        assert await get("/healthz", None) == 200
        for path in ("/metrics", "/v1/resource/snapshot"):
            assert await get(path, None) == 401
            assert await get(path, "Bearer wrong") == 401
            assert await get(path, f"Basic {TOKEN}") == 401
            assert await get(path, f"Bearer {TOKEN}x") == 401
            assert await get(path, f"Bearer {TOKEN}") == 200


async def test_an_unauthenticated_connection_is_not_kept_alive() -> None:
    async with exporter_at(HttpLimits(), token=TOKEN) as address:
        with_body = (b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody"
                     b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")  # refused first
        for request in (get_request("/metrics"), get_request("/metrics", "wrong"),
                        get_request("/healthz"), with_body):
            reader, writer = await asyncio.open_connection(*address)
            writer.write(request)
            head, _ = await read_response(reader)
            assert b"\r\nConnection: close\r\n" in head, head
            assert await asyncio.wait_for(reader.read(), 10) == b""  # the server hung up
            writer.close()
        # With the token, the same connection serves the next request too.
        reader, writer = await asyncio.open_connection(*address)
        heads = []
        for path in ("/healthz", "/metrics"):
            writer.write(get_request(path, TOKEN))
            heads.append((await read_response(reader))[0])
        writer.close()
    assert all(h.startswith(b"HTTP/1.1 200 ") and b"Connection: close" not in h
               for h in heads), heads


async def test_a_token_that_is_not_utf8_is_a_wrong_token(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with exporter_at(HttpLimits(), token=TOKEN) as address:
        reader, writer = await asyncio.open_connection(*address)
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xff\xfe"
                     b"\r\n\r\n")
        head, body = await read_response(reader)
        writer.close()
    assert head.startswith(b"HTTP/1.1 401 "), head
    assert json.loads(body)["error"] == "missing or wrong bearer token"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


@pytest.mark.parametrize("flags, complaint", [
    (["--tls-cert", "CERT"], "go together"),
    (["--tls-cert", "KEY", "--tls-key", "KEY"], "cannot load"),
    (["--auth-token-file", "EMPTY"], "one token"),
    (["--auth-token-file", "MISSING"], "cannot read"),
    (["--max-connections", "0"], "positive"),
])
def test_exporter_rejects_bad_security_flags(certificate: tuple[Path, Path], tmp_path: Path,
                                             flags: list[str], complaint: str) -> None:
    (tmp_path / "empty").write_text("\n")
    paths = {"CERT": str(certificate[0]), "KEY": str(certificate[1]),
             "EMPTY": str(tmp_path / "empty"), "MISSING": str(tmp_path / "missing")}
    with pytest.raises(UsageError, match=complaint):
        parse(["--instance-id", "i", "--proxy-id", "p", *(paths.get(f, f) for f in flags)])


@pytest.fixture
def tls_exporter(certificate: tuple[Path, Path], token_file: Path,
                 tmp_path: Path) -> Iterator[str]:
    port = port_or_free(0)
    cert, key = certificate
    proc = _limited_process(["poolscope.exporters.instance", "--instance-id", "tls-1",
                             "--proxy-id", "p",
                             "--listen", f"127.0.0.1:{port}", "--tls-cert", str(cert),
                             "--tls-key", str(key), "--auth-token-file", str(token_file)],
                            tmp_path / "exporter.log", nofile=1024)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        stop_group(proc)


@pytest.fixture
def tls_bridge(certificate: tuple[Path, Path], token_file: Path,
               tmp_path: Path) -> Iterator[str]:
    port = port_or_free(0)
    cert, key = certificate
    proc = _limited_process(["poolscope.scheduler_bridge", "--prometheus-url", "http://127.0.0.1:9",
                             "--listen", f"127.0.0.1:{port}", "--tls-cert", str(cert),
                             "--tls-key", str(key), "--auth-token-file", str(token_file)],
                            tmp_path / "bridge.log", nofile=1024)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        stop_group(proc)


def assert_tls_and_token(address: str, cert: Path, guarded: str) -> None:
    trusted = ssl.create_default_context(cafile=str(cert))
    url = f"https://{address}"
    status = eventually(lambda: _tls_healthz(url, trusted), lambda s: s == 200, 30,
                        "/healthz over TLS without a token")
    assert status == 200
    status, headers, _ = fetch(f"{url}{guarded}", context=trusted)
    assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer")
    assert fetch(f"{url}{guarded}", context=trusted, token="wrong")[0] == 401
    assert fetch(f"{url}{guarded}", context=trusted, token=TOKEN)[0] == 200
    # The certificate is really checked, and nothing is served in clear.
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        fetch(f"{url}/healthz", context=ssl.create_default_context())
    with pytest.raises((OSError, http.client.HTTPException)):
        fetch(f"http://{address}/healthz")


def _tls_healthz(url: str, context: ssl.SSLContext) -> int:
    try:
        return fetch(f"{url}/healthz", context=context, timeout=2)[0]
    except OSError:
        return 0


def test_exporter_over_tls_with_token_is_scraped_by_a_real_prometheus(
        tls_exporter: str, certificate: tuple[Path, Path], token_file: Path,
        tmp_path: Path) -> None:
    cert = certificate[0]
    assert_tls_and_token(tls_exporter, cert, "/metrics")
    assert_tls_and_token(tls_exporter, cert, "/v1/resource/snapshot")
    tls = {"scheme": "https", "tls_config": {"ca_file": str(cert)}, "honor_labels": True,
           "scrape_interval": "1s", "static_configs": [{"targets": [tls_exporter]}]}
    jobs = [{**tls, "job_name": "with-token",
             "authorization": {"type": "Bearer", "credentials_file": str(token_file)}},
            {**tls, "job_name": "without-token"}]
    with running_prometheus(tmp_path / "prometheus", jobs) as prom:
        prom.wait_for('up{job="with-token"} == 1', timeout=30)
        prom.wait_for('up{job="without-token"} == 0', timeout=30)
        assert prom.query('poolscope_host_cpus{instance_id="tls-1",job="with-token"}')
        assert not prom.query('poolscope_host_cpus{job="without-token"}')


def test_scheduler_bridge_tls_and_token_with_the_same_certificate(
        tls_bridge: str, certificate: tuple[Path, Path]) -> None:
    assert_tls_and_token(tls_bridge, certificate[0], "/metrics")
