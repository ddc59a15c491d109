"""The bridge keeps the memory a refresh frees where the C library lets it."""

from __future__ import annotations

import platform
import sys

from scheduler_bridge.heap import keep_freed_memory


def test_glibc_takes_the_thresholds_and_anything_else_says_it_did_not() -> None:
    glibc = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    assert keep_freed_memory() is glibc

