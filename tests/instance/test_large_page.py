"""A large engine page is read off the event loop: the exporter keeps answering while
it is parsed (docs/reliability.md, "Hostile input", has the figures)."""

from __future__ import annotations

import asyncio
import time

import pytest

from poolscope.exporters.instance import engine
from tests.instance.conftest import EngineServer, MakeExporter, fixture_text, health

RUNNING = ('vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"}'
           ' 37.0')
# Ranks enough for a read of seconds on a loaded 2-core machine (8.6 MiB of lines the
# reader parses, under the 16 MiB bound): on the loop, it held every scrape as long.
RANKS = 100_000
TICK_S = 0.01


async def test_the_loop_keeps_turning_while_a_large_page_is_read(
        engine_server: EngineServer, make_exporter: MakeExporter,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Ticks of the loop land while the page is being parsed: on the loop, the parse
    would have let none through, however fast or slow the machine."""
    page = fixture_text("vllm")
    assert page.count(RUNNING) == 1
    engine_server.body = page.replace(RUNNING, "\n".join(
        RUNNING.replace('engine="0"', f'engine="{i}"').replace(" 37.0", " 0")
        for i in range(RANKS)))
    # A roomy timeout: what is tested is the loop while the read runs, not its speed.
    exporter, registry = make_exporter(engine_metrics_url=engine_server.url,
                                       engine_timeout=60.0)
    parses: list[tuple[float, float]] = []
    interpret = engine.interpret

    def timed(*args: object) -> engine.EngineSample:
        start = time.monotonic()
        try:
            return interpret(*args)  # type: ignore[arg-type]
        finally:
            parses.append((start, time.monotonic()))

    monkeypatch.setattr(engine, "interpret", timed)
    ticks: list[float] = []

    async def tick() -> None:
        while True:
            await asyncio.sleep(TICK_S)
            ticks.append(time.monotonic())

    ticker = asyncio.create_task(tick())
    try:
        await exporter.loop.sample_all()
    finally:
        ticker.cancel()
    assert registry.get_sample_value("poolscope_collector_success", health("engine")) == 1
    [(start, end)] = parses
    during = [t for t in ticks if start < t < end]
    assert len(during) >= 2, (end - start, len(ticks))
