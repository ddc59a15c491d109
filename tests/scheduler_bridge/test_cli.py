"""`python -m poolscope.scheduler_bridge`: flags, refusals, and a real process over TLS."""

from __future__ import annotations

import asyncio
import signal
import ssl
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from harness.canned_prometheus import CannedPrometheus, pool_series
from harness.prometheus import REPO, free_port
from poolscope.scheduler_bridge.__main__ import main
from poolscope.service.argtypes import parse_listen


@pytest.mark.parametrize(("text", "expected"), [
    ("127.0.0.1:10130", ("127.0.0.1", 10130)),
    ("[::1]:8000", ("::1", 8000)),
    ("9000", ("127.0.0.1", 9000)),
    (":9001", ("127.0.0.1", 9001)),
])
def test_listen_defaults_to_loopback(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen(text) == expected


@pytest.mark.parametrize("text", ["nonsense", "127.0.0.1:0", "127.0.0.1:99999",
                                  "[::zz]:80", "host:\uff18\uff10"])
def test_bad_listen_is_one_argparse_line(text: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--prometheus-url", "http://127.0.0.1:1", "--listen", text])
    assert exit_.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert "error: argument --web.listen-address/--listen:" in last


@pytest.mark.parametrize("extra", [
    ["--tls-cert", "/nonexistent.pem"],  # without --tls-key
    ["--auth-token-file", "/nonexistent-token"],
])
def test_bad_configuration_exits_2(extra: list[str],
                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--prometheus-url", "http://127.0.0.1:1", *extra]) == 2
    assert "poolscope-scheduler-bridge:" in capsys.readouterr().err


def test_empty_token_file_is_refused(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("\n")
    assert main(["--prometheus-url", "http://x", "--auth-token-file", str(token)]) == 2


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key


@pytest.mark.integration
async def test_process_serves_over_tls_with_a_token(tmp_path: Path,
                                                    canned: CannedPrometheus) -> None:
    canned.vector = pool_series("a")
    cert, key = _self_signed(tmp_path)
    token = tmp_path / "token"
    token.write_text("tok\n")
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "poolscope.scheduler_bridge", "--prometheus-url", canned.url,
        "--listen", f"127.0.0.1:{port}", "--tls-cert", str(cert), "--tls-key", str(key),
        "--auth-token-file", str(token), cwd=REPO, stderr=asyncio.subprocess.PIPE)
    tls = ssl.create_default_context(cafile=str(cert))
    base = f"https://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            deadline = asyncio.get_running_loop().time() + 30  # a busy CI machine
            while True:
                try:
                    async with session.get(f"{base}/healthz", ssl=tls) as resp:
                        if resp.status == 200:
                            break
                except aiohttp.ClientConnectionError:
                    if asyncio.get_running_loop().time() > deadline:
                        raise
                    await asyncio.sleep(0.05)
            async with session.get(f"{base}/debug/proxy_pool_resources", ssl=tls) as resp:
                assert resp.status == 401
            async with session.get(f"{base}/debug/proxy_pool_resources", ssl=tls,
                                   headers={"Authorization": "Bearer tok"}) as resp:
                assert resp.status == 200
                assert list((await resp.json())["pools"]) == ["a"]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = await proc.communicate()
    assert proc.returncode == 0, stderr.decode()
