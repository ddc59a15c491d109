"""How the simulated engine's /metrics misbehaves on demand: hang, answer 500, or
answer text that only looks like exposition.

Tests flip the switch over HTTP (GET|POST /admin/fault) while the engine keeps
serving requests, so what reads the engine's page (the Instance exporter) meets a
broken engine that is otherwise alive.
"""

from __future__ import annotations

import asyncio

FAULT_MODES = ("none", "hang", "error500", "garbage")
# Looks like exposition text but is not: an unterminated label set, a value
# that is not a number, and a sample without a value.
GARBAGE_METRICS = (
    b'# TYPE vllm:num_requests_running gauge\n'
    b'vllm:num_requests_running{engine="0",model_name="\n'
    b'vllm:num_requests_waiting twelve\n'
    b'vllm:kv_cache_usage_perc{engine="0"}\n'
)


class FaultSwitch:
    """How /metrics misbehaves, switchable at run time so tests can break a live engine."""

    def __init__(self) -> None:
        self.mode = "none"
        self._changed = asyncio.Event()

    def set(self, mode: str) -> None:
        if mode not in FAULT_MODES:
            raise ValueError(f"unknown fault mode {mode!r}; expected one of {FAULT_MODES}")
        self.mode = mode
        # Wake every hung scrape; each re-checks the mode it now finds.
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_while_hanging(self) -> None:
        while self.mode == "hang":
            await self._changed.wait()
