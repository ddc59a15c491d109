"""Waiting for a running stack to reach a state it promises to reach."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
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


async def until(probe: Callable[[], T | Awaitable[T]], ok: Callable[[T], bool], what: str,
                limit_s: float = 10.0) -> T:
    """Poll `probe` (awaited when it is a coroutine) while other tasks run until `ok`
    holds; the value that held. The limit only guards against hangs."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while True:
        seen = probe()
        if inspect.isawaitable(seen):
            seen = await seen
        if ok(seen):
            return seen
        if loop.time() > deadline:
            raise AssertionError(f"never happened within {limit_s:g}s: {what}")
        await asyncio.sleep(0.005)
