"""Waiting for a running stack to reach a state it promises to reach."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(probe: Callable[[], T], ok: Callable[[T], bool], timeout: float, what: str,
               every: float = 0.2) -> T:
    """Poll `probe` until `ok` holds; fail with the last value seen after `timeout`.

    The timeout is the bound the contract promises (a staleness threshold plus an
    evaluation, a refresh), not a speed measurement.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if ok(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not true within {timeout:g}s; last: {value!r}")
        time.sleep(every)
