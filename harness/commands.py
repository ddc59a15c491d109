"""A console script run as a child process for a test, always reaped afterwards."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def command_process(module: str, *args: str) -> Iterator[subprocess.Popen[str]]:
    """`python -m module args...` with text pipes; killed if the test left it running."""
    proc = subprocess.Popen([sys.executable, "-m", module, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()
