"""The simulated engine's scheduler: a batch of running requests and a FIFO queue.

It models what a load metric needs from vLLM and nothing more: a request is
admitted to the running batch when a slot is free, otherwise it waits in FIFO
order, otherwise it is refused. Once running it spends `prompt_tokens *
prefill` on prefill, then decodes one token every `1 / tokens_per_second`.
Every number `sim_metrics` publishes is derived from this state at scrape
time, so it follows the real load by construction.

Time comes from a `Clock` so tests can hold requests running for as long as
they need to look at them, with no timing assumptions.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol

from deploy.demo.sim_stats import EngineStats

# Streaming emits the tokens that are due at most this often: at high token
# rates one SSE chunk per token would measure the event loop, not the model.
MIN_EMIT_INTERVAL_S = 0.01
# Guards floor() against float error exactly at a token's deadline.
_EPSILON = 1e-9


class Clock(Protocol):
    def now(self) -> float: ...

    async def sleep_until(self, deadline: float) -> None: ...


class MonotonicClock:
    """The event loop's clock, which is what asyncio's own timers use."""

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def sleep_until(self, deadline: float) -> None:
        await asyncio.sleep(max(0.0, deadline - self.now()))


@dataclass(frozen=True)
class EngineConfig:
    model: str
    max_running: int
    max_waiting: int
    tokens_per_second: float
    prefill_ms_per_token: float
    # KV cache size in tokens; occupancy = tokens held by running requests / this.
    kv_cache_tokens: int
    # Output length of a request that sets no max_tokens. It ends as if the model
    # had emitted end-of-sequence, so vLLM would report it finished by "stop".
    default_output_tokens: int = 64

    def __post_init__(self) -> None:
        problems = [
            msg for bad, msg in (
                (self.max_running < 1, "max_running must be >= 1"),
                (self.max_waiting < 0, "max_waiting must be >= 0"),
                (not self.tokens_per_second > 0, "tokens_per_second must be > 0"),
                (not self.prefill_ms_per_token >= 0, "prefill_ms_per_token must be >= 0"),
                (self.kv_cache_tokens < 1, "kv_cache_tokens must be >= 1"),
                (self.default_output_tokens < 1, "default_output_tokens must be >= 1"),
            ) if bad
        ]
        if problems:
            raise ValueError("; ".join(problems))


class QueueFull(Exception):
    """The batch and the waiting queue are both full."""


@dataclass(eq=False)
class SimRequest:
    """One request's timeline; times are on the engine's clock."""

    request_id: str
    prompt_tokens: int
    output_tokens: int
    finish_reason: str
    arrival: float
    scheduled_at: float | None = None
    decode_start: float | None = None

    def generated_at(self, now: float, tokens_per_second: float) -> int:
        if self.decode_start is None or now < self.decode_start:
            return 0
        due = math.floor((now - self.decode_start) * tokens_per_second + _EPSILON)
        return min(self.output_tokens, due)

    def kv_tokens_at(self, now: float, tokens_per_second: float) -> int:
        """KV blocks are allocated for the prompt when scheduled, then grow per token."""
        if self.scheduled_at is None:
            return 0
        return self.prompt_tokens + self.generated_at(now, tokens_per_second)


TokenSink = Callable[[int], Awaitable[None]]


class Scheduler:
    def __init__(self, config: EngineConfig, clock: Clock | None = None) -> None:
        self.config = config
        self.clock: Clock = clock or MonotonicClock()
        self.stats = EngineStats()
        self._running: dict[str, SimRequest] = {}
        self._waiting: deque[SimRequest] = deque()
        self._scheduled: dict[str, asyncio.Event] = {}
        self._ids = itertools.count()

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    def kv_cache_usage(self) -> float:
        now = self.clock.now()
        tps = self.config.tokens_per_second
        held = sum(r.kv_tokens_at(now, tps) for r in self._running.values())
        # No preemption is modelled, so demand beyond the cache shows as full.
        return min(1.0, held / self.config.kv_cache_tokens)

    def generation_tokens_total(self) -> int:
        now = self.clock.now()
        tps = self.config.tokens_per_second
        live = sum(r.generated_at(now, tps) for r in self._running.values())
        return self.stats.generation_tokens_finished + live

    def admit(self, prompt_tokens: int, max_tokens: int | None) -> Ticket:
        """Enter the batch or the queue now, or raise QueueFull.

        Synchronous on purpose: the caller learns about a refusal before it
        has started a response, and nothing can interrupt between admission
        and entering the returned ticket's `async with`.
        """
        if len(self._running) >= self.config.max_running and (
            len(self._waiting) >= self.config.max_waiting
        ):
            raise QueueFull(
                f"{len(self._running)} running and {len(self._waiting)} waiting "
                f"(max_running={self.config.max_running}, "
                f"max_waiting={self.config.max_waiting})"
            )
        output, reason = (
            (self.config.default_output_tokens, "stop") if max_tokens is None
            else (max_tokens, "length")
        )
        req = SimRequest(f"cmpl-sim-{next(self._ids)}", prompt_tokens, output, reason,
                         arrival=self.clock.now())
        self._scheduled[req.request_id] = asyncio.Event()
        if len(self._running) < self.config.max_running and not self._waiting:
            self._start(req)
        else:
            self._waiting.append(req)
        return Ticket(self, req)

    def _start(self, req: SimRequest) -> None:
        req.scheduled_at = self.clock.now()
        self._running[req.request_id] = req
        self._scheduled[req.request_id].set()

    def _finish(self, req: SimRequest, completed: bool) -> None:
        """Account for a request leaving, by completion or abort, and refill the batch."""
        del self._scheduled[req.request_id]
        now = self.clock.now()
        if self._running.pop(req.request_id, None) is None:
            self._waiting.remove(req)
        stats = self.stats
        stats.generation_tokens_finished += req.generated_at(now, self.config.tokens_per_second)
        if not completed:
            stats.finished["abort"] += 1
        else:
            assert req.scheduled_at is not None and req.decode_start is not None
            stats.finished[req.finish_reason] += 1
            stats.e2e_latency.observe(now - req.arrival)
            stats.queue_time.observe(req.scheduled_at - req.arrival)
            first_token = req.decode_start + 1.0 / self.config.tokens_per_second
            stats.time_to_first_token.observe(first_token - req.arrival)
        while self._waiting and len(self._running) < self.config.max_running:
            self._start(self._waiting.popleft())


class Ticket:
    """An admitted request. `async with` guarantees it leaves the engine exactly once."""

    def __init__(self, scheduler: Scheduler, request: SimRequest) -> None:
        self._scheduler = scheduler
        self.request = request
        self._completed = False

    async def __aenter__(self) -> Ticket:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        self._scheduler._finish(self.request, self._completed)

    async def run(self, sink: TokenSink | None = None) -> None:
        """Wait for a batch slot, prefill, decode; hand tokens to `sink` as they come due.

        Without a sink the request simply takes its full time, like a
        non-streaming call whose answer is sent at the end.
        """
        sched, req = self._scheduler, self.request
        clock, tps = sched.clock, sched.config.tokens_per_second
        await sched._scheduled[req.request_id].wait()
        assert req.scheduled_at is not None
        # Timeline points are computed, not observed, so a late event loop does
        # not stretch the simulated model (and a test clock can jump past them).
        prefill_done = (req.scheduled_at
                        + req.prompt_tokens * sched.config.prefill_ms_per_token / 1000.0)
        await clock.sleep_until(prefill_done)
        req.decode_start = prefill_done
        sched.stats.prompt_tokens += req.prompt_tokens
        done_at = req.decode_start + req.output_tokens / tps
        if sink is None:
            await clock.sleep_until(done_at)
        else:
            emitted = 0
            while emitted < req.output_tokens:
                next_token = req.decode_start + (emitted + 1) / tps
                batch_until = min(clock.now() + MIN_EMIT_INTERVAL_S, done_at)
                await clock.sleep_until(max(next_token, batch_until))
                due = req.generated_at(clock.now(), tps)
                if due > emitted:
                    await sink(due - emitted)
                    emitted = due
        self._completed = True
