"""Benchmarks start Prometheus, VictoriaMetrics and exporters in their own process
groups, and stop them on the way out of a `with` block. Python's default SIGTERM
kills the interpreter without unwinding, which would leave all of them running
(a `timeout` around a long benchmark does exactly that), so SIGTERM is turned
into the same exit a Ctrl-C gets."""

from __future__ import annotations

import signal
from types import FrameType

EXIT_ON_SIGTERM = 128 + signal.SIGTERM


def _exit(signum: int, frame: FrameType | None) -> None:
    # `timeout` signals its child and then its whole process group: a second
    # SIGTERM would interrupt the very cleanup the first one started.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise SystemExit(EXIT_ON_SIGTERM)


def unwind_on_sigterm() -> None:
    """From now on SIGTERM raises SystemExit, so every open `with` stops what it started."""
    signal.signal(signal.SIGTERM, _exit)
