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
import resource
import socket
import ssl
import subprocess
import sys
import urllib.error
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from deploy.demo.processes import port_or_free, stop_group
from exporters.common.web import HttpLimits, UsageError, serving
from exporters.instance.config import parse
from exporters.instance.server import make_app
from exporters.instance.service import InstanceExporter, Settings
from tests.instance.fakes import three_gpus
from tests.reliability.stack import fetch, self_signed_certificate
from tests.support.polling import eventually
from tests.support.prometheus import running_prometheus

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
        async with serving(make_app(exporter, token), "127.0.0.1", 0, limits=limits) as address:
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

async def test_exporter_answers_503_past_its_connection_cap_then_recovers() -> None:
    async with exporter_at(HttpLimits(max_connections=4)) as address:
        held = [await asyncio.open_connection(*address) for _ in range(4)]
        await asyncio.sleep(0.1)  # let the server register them
        over = await exchange(address, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status_of(over) == 503
        for _, writer in held:
            writer.close()
        deadline = asyncio.get_running_loop().time() + 10
        while True:
            line = await exchange(address, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            if status_of(line) == 200 or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.05)
    assert status_of(line) == 200


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
    assert_survives_a_flood(["exporters.instance", "--instance-id", "i", "--proxy-id", "p"],
                            log, nofile=256)


@pytest.mark.parametrize("argv", [
    ["scheduler_bridge"],
    ["proxy_bridge", "--proxy-id", "hp_127.0.0.1:8001"],
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
    proc = _limited_process(["exporters.instance", "--instance-id", "tls-1", "--proxy-id", "p",
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
    proc = _limited_process(["scheduler_bridge", "--prometheus-url", "http://127.0.0.1:9",
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
