"""What a token costs in each pool now, from the engines' own counters: the time-based
oracle's second input (policies.OracleTime).

llama.cpp counts the seconds its slots spent generating and the tokens they generated
(`llamacpp:tokens_predicted_seconds_total`, `llamacpp:tokens_predicted_total`, added
when a request ends); their increase over the last few seconds is the time a token
took per request at the batch the pool ran, which grows with the batch on a CPU. Read
in the background, as an Instance exporter would, never at the decision: llama.cpp
answers /metrics only between two decode steps. An engine that publishes neither (the
simulated one) leaves its pool unmeasured.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence

import aiohttp

from poolscope.exporters.common.promtext import PromTextError, select

SECONDS = "llamacpp:tokens_predicted_seconds_total"
TOKENS = "llamacpp:tokens_predicted_total"
EVERY_S = 1.0
WINDOW_S = 5.0


class DecodeTimes:
    """Seconds per generated token per pool over the last WINDOW_S, or the last such
    figure while no request ended within it."""

    def __init__(self, pages: Mapping[str, Sequence[str]], session: aiohttp.ClientSession,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._engines = pages  # each pool's engines' /metrics URLs
        self._session = session
        self._clock = clock
        self._samples: dict[str, deque[tuple[float, float, float]]] = {
            p: deque() for p in self._engines}
        self._last: dict[str, float] = {}

    def __call__(self) -> Mapping[str, float]:
        return dict(self._last)

    async def run(self) -> None:
        while True:
            await self.sample()
            await asyncio.sleep(EVERY_S)

    async def sample(self) -> None:
        """Every engine's counters once."""
        await asyncio.gather(*(self._sample(p, urls) for p, urls in self._engines.items()))

    async def _sample(self, pool: str, urls: Sequence[str]) -> None:
        try:
            pages = await asyncio.gather(*(self._page(u) for u in urls))
            counters = [select(page, (SECONDS, TOKENS)) for page in pages]
        except (aiohttp.ClientError, TimeoutError, PromTextError):
            return  # a missed read: the last figure stands, never a made-up one
        if any(SECONDS not in c or TOKENS not in c for c in counters):
            return
        now = self._clock()
        window = self._samples[pool]
        window.append((now, sum(c[SECONDS][0][1] for c in counters),
                       sum(c[TOKENS][0][1] for c in counters)))
        while window[0][0] < now - WINDOW_S:
            window.popleft()
        _, seconds0, tokens0 = window[0]
        _, seconds1, tokens1 = window[-1]
        if tokens1 > tokens0:
            self._last[pool] = (seconds1 - seconds0) / (tokens1 - tokens0)

    async def _page(self, url: str) -> str:
        async with self._session.get(url, raise_for_status=True) as resp:
            return await resp.text()
