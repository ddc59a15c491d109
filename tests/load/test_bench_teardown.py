"""A benchmark killed by `timeout` must still stop the servers it started."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil

from bench.teardown import EXIT_ON_SIGTERM

REPO = Path(__file__).resolve().parents[2]
# A stand-in benchmark: one child in its own session, stopped by a slow `finally`.
SCRIPT = """
import subprocess, sys, time
from bench.teardown import unwind_on_sigterm
unwind_on_sigterm()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                         start_new_session=True)
try:
    # Inside the `try`: a SIGTERM may arrive as soon as the pid is read.
    print(child.pid, flush=True)
    time.sleep(60)
finally:
    print("unwinding", flush=True)
    time.sleep(0.5)  # stopping Prometheus takes a while
    child.terminate()
    child.wait()
"""


def test_sigterm_unwinds_and_stops_the_children() -> None:
    """Signalled twice, as `timeout` does (the child, then its process group)."""
    bench = subprocess.Popen([sys.executable, "-c", SCRIPT], cwd=REPO,
                             stdout=subprocess.PIPE, text=True)
    assert bench.stdout is not None
    child = psutil.Process(int(bench.stdout.readline()))
    try:
        bench.terminate()
        # The second signal lands while the first one's `finally` is unwinding.
        assert bench.stdout.readline() == "unwinding\n"
        bench.terminate()
        assert bench.wait(timeout=30) == EXIT_ON_SIGTERM
        assert _ended(child, within=10), "the child outlived its benchmark"
    finally:
        if _running(child):
            child.kill()


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _ended(proc: psutil.Process, within: float) -> bool:
    deadline = time.monotonic() + within
    while _running(proc):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
