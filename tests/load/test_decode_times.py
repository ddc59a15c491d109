"""The time-based oracle's token times, from llama.cpp's own counters on its real page."""

from __future__ import annotations

import re

import aiohttp

from bench.scheduling.decode_times import SECONDS, TOKENS, WINDOW_S, DecodeTimes
from harness.static_http import FIXTURES, Page, serving
from tests.support.clock import Clock

LLAMA = (FIXTURES / "llamacpp.txt").read_text()
SIM = (FIXTURES / "vllm.txt").read_bytes()  # a page without llama.cpp's counters


def llama_page(seconds: float, tokens: float) -> bytes:
    """The real page with its two decode counters at the values given."""
    text = re.sub(rf"^{re.escape(SECONDS)} .*$", f"{SECONDS} {seconds}", LLAMA, flags=re.M)
    return re.sub(rf"^{re.escape(TOKENS)} .*$", f"{TOKENS} {tokens}", text, flags=re.M).encode()


async def test_a_token_costs_the_increase_of_seconds_over_tokens_within_the_window() -> None:
    clock = Clock()
    llama = Page(llama_page(10.0, 1000))
    with serving(llama) as llama_url, serving(SIM) as sim_url:
        async with aiohttp.ClientSession() as session:
            times = DecodeTimes({"a": [llama_url], "sim": [sim_url]}, session, clock)
            await times.sample()
            assert times() == {}  # one reading is no rate
            clock.now += 1
            llama.body = llama_page(12.0, 1100)
            await times.sample()
            assert times() == {"a": 0.02}
            # No request ended for longer than the window: the last figure stands.
            clock.now += WINDOW_S + 1
            await times.sample()
            assert times() == {"a": 0.02}
            clock.now += 1
            llama.body = llama_page(13.0, 1110)
            await times.sample()
            assert times() == {"a": 0.1}
            llama.status = 500  # a missed read changes nothing
            await times.sample()
            assert times() == {"a": 0.1}
