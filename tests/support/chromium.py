"""Headless Chromium (Debian's package) for tests that look at a page as a person would."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def chromium(tmp_path: Path, *args: str) -> str:
    """Run headless Chromium with a fresh profile; returns stdout (e.g. --dump-dom).

    The flags keep it off the network: this machine reaches no outside host.
    """
    exe = shutil.which("chromium")
    if exe is None:
        pytest.skip("chromium is not installed (`make test` installs Debian's chromium)")
    run = subprocess.run(
        [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--hide-scrollbars", f"--user-data-dir={tmp_path / 'profile'}",
         *args],
        capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR", f"{path} is not a PNG"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
