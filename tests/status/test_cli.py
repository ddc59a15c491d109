"""`python -m poolscope.scheduler_bridge.status.cli` as a user runs it, against a bridge in this
process: the screen, --json, --watch, the token, and the exit codes."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.prometheus import REPO, free_port
from poolscope.scheduler_bridge.status.cli import main
from poolscope.service.auth import Access
from poolscope.service.web import Exposure
from tests.status.conftest import MakeBridge
from tests.status.fleet import H100, blind_pool, busy_pool


async def status(*args: str, columns: int = 120) -> tuple[int, str, str]:
    """Run the command in a child (not a TTY); the bridge keeps serving meanwhile."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "poolscope.scheduler_bridge.status.cli", *args, cwd=REPO,
        env={"COLUMNS": str(columns), "PYTHONIOENCODING": "utf-8"},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_one_screen_of_every_pool(make_bridge: MakeBridge) -> None:
    bridge = await make_bridge([*busy_pool("busy"), *blind_pool("blind")])
    code, out, err = await status("--bridge-url", bridge.url)
    assert (code, err) == (0, "")
    assert "\x1b[" not in out  # not a TTY: no colour
    assert all(len(line) <= 120 for line in out.splitlines())
    busy, blind = (next(line for line in out.splitlines() if line.startswith(p))
                   for p in ("busy ", "blind "))
    assert "62%" in busy and "35%" in busy
    assert "%" not in blind and "?" in blind
    assert H100 in out


async def test_json_is_the_view_as_data(make_bridge: MakeBridge) -> None:
    bridge = await make_bridge([*busy_pool("busy"), *blind_pool("blind")])
    code, out, _ = await status("--bridge-url", bridge.url, "--json")
    assert code == 0
    doc: dict[str, Any] = json.loads(out)
    pools = {p["proxy_id"]: p for p in doc["pools"]}
    assert pools["busy"]["load_ratio"] == 0.62 and pools["blind"]["load_ratio"] is None
    assert pools["busy"]["gpus"][0]["unhealthy"] == 1 and pools["blind"]["gpus"] is None
    assert (pools["blind"]["idle"], pools["blind"]["idle_unknown"]) == (0, 2)


async def test_watch_refreshes_until_its_count(make_bridge: MakeBridge) -> None:
    bridge = await make_bridge(busy_pool("busy"))
    code, out, _ = await status("--bridge-url", bridge.url, "--json", "--watch", "0.5",
                                "--count", "2")
    assert code == 0
    assert [json.loads(line)["pools"][0]["proxy_id"] for line in out.splitlines()] == \
        ["busy", "busy"]


async def test_the_token_file_is_sent(make_bridge: MakeBridge, tmp_path: Path) -> None:
    bridge = await make_bridge(busy_pool("busy"), exposure=Exposure(Access(bearer_token="s3cret")))
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    assert (await status("--bridge-url", bridge.url, "--json",
                         "--auth-token-file", str(token)))[0] == 0
    code, out, err = await status("--bridge-url", bridge.url)
    assert (code, out) == (1, "")
    assert err.count("\n") == 1 and "401" in err


async def test_a_bridge_without_a_snapshot_is_exit_1(make_bridge: MakeBridge) -> None:
    bridge = await make_bridge([])
    bridge.prometheus.fail_status = 500
    code, out, err = await status("--bridge-url", bridge.url)
    assert (code, out) == (1, "")
    assert err.startswith("poolscope-status: ") and "503" in err


def test_an_unreachable_bridge_is_one_line_and_exit_1(
        capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    assert main(["--bridge-url", url, "--timeout", "5"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"poolscope-status: bridge {url} unreachable")
    assert captured.err.count("\n") == 1


@pytest.mark.parametrize("argv", [
    ["--watch", "0"], ["--watch", "7200"], ["--watch", "soon"], ["--count", "2"],
    ["--watch", "1", "--count", "0"], ["--timeout", "-1"], ["--colour"],
])
def test_bad_flags_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert "poolscope-status: error:" in capsys.readouterr().err


def test_an_unreadable_token_file_exits_2(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--auth-token-file", str(tmp_path / "absent")]) == 2
    assert "--auth-token-file" in capsys.readouterr().err


async def test_ctrl_c_ends_a_watch_with_0(make_bridge: MakeBridge) -> None:
    bridge = await make_bridge(busy_pool("busy"))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "poolscope.scheduler_bridge.status.cli", "--bridge-url", bridge.url,
        "--json", "--watch", "0.5", cwd=REPO, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    first = await asyncio.wait_for(proc.stdout.readline(), timeout=60)
    assert json.loads(first)["pools"][0]["proxy_id"] == "busy"
    proc.send_signal(signal.SIGINT)
    _, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert (proc.returncode, err) == (0, b"")
