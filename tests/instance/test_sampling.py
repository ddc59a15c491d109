"""Collector health and background sampling: a scrape never waits on a device."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from harness.polling import until
from poolscope.contract import catalog
from poolscope.contract.thresholds import FRESH_S
from poolscope.exporters.common.health import (
    ErrorReason,
    HealthBoard,
    HealthFamilies,
    UnavailableReason,
)
from poolscope.exporters.common.sampling import SampleError, SamplingLoop, Unavailable
from poolscope.service.identity import Identity
from tests.instance.conftest import MakeExporter, health
from tests.support.clock import Clock

IDS = Identity("proxy-a", "inst-1")


class ScriptedReader:
    """Returns its queue of outcomes one per read; an Event blocks until set."""

    name = "scripted"
    reasons = (ErrorReason.TIMEOUT, ErrorReason.PARSE)

    def __init__(self, *outcomes: object) -> None:
        self.outcomes = list(outcomes)

    async def read(self) -> float:
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, asyncio.Event):
            await outcome.wait()
            return 1.0
        if isinstance(outcome, Exception):
            raise outcome
        return float(outcome)  # type: ignore[arg-type]

    def families(self, sample: float, ids: Identity) -> Iterator[Metric]:
        metric = catalog.HOST_CPU_COUNT.new()
        ids.add(metric, "test", sample)
        yield metric


class BoardCollector(Collector):
    def __init__(self, board: HealthBoard, loop: SamplingLoop) -> None:
        self.board, self.loop = board, loop

    def collect(self) -> Iterator[Metric]:
        for slot in self.loop._slots:
            yield from slot.families(IDS)
        yield from self.board.families(IDS.labels("exporter"))


def setup(reader: ScriptedReader, clock: Clock) -> tuple[SamplingLoop, CollectorRegistry]:
    board = HealthBoard(monotonic=clock, wall=lambda: 1.7e9)
    loop = SamplingLoop(1.0, board, monotonic=clock)
    registry = CollectorRegistry()
    registry.register(BoardCollector(board, loop))
    return loop, registry


async def test_health_series_follow_success_failure_and_age() -> None:
    clock = Clock()
    reader = ScriptedReader(7, SampleError(ErrorReason.PARSE, "garbled"), 8)
    loop, registry = setup(reader, clock)
    slot = loop.add(reader)
    h = health("scripted")
    assert registry.get_sample_value("poolscope_collector_success", h) is None
    assert registry.get_sample_value("poolscope_collector_errors_total",
                                     {**h, "reason": "parse"}) == 0

    await loop.sample(slot)
    clock.now += 2.5
    assert registry.get_sample_value("poolscope_host_cpus",
                                     {"proxy_id": "proxy-a", "instance_id": "inst-1",
                                      "source": "test"}) == 7
    assert registry.get_sample_value("poolscope_collector_success", h) == 1
    assert registry.get_sample_value("poolscope_collector_sample_age_seconds", h) == 2.5
    assert registry.get_sample_value(
        "poolscope_collector_last_success_timestamp_seconds", h) == 1.7e9

    await loop.sample(slot)
    clock.now += 1.0
    assert slot.value is None  # a failed sample is not re-served as current
    assert registry.get_sample_value("poolscope_collector_success", h) == 0
    assert registry.get_sample_value("poolscope_collector_sample_age_seconds", h) == 3.5
    assert registry.get_sample_value("poolscope_collector_errors_total",
                                     {**h, "reason": "parse"}) == 1

    await loop.sample(slot)
    assert registry.get_sample_value("poolscope_collector_sample_age_seconds", h) == 0
    assert registry.get_sample_value("poolscope_collector_success", h) == 1


async def test_a_scrape_during_a_hung_read_answers_from_held_state() -> None:
    clock = Clock()
    gate = asyncio.Event()
    reader = ScriptedReader(5, gate)
    loop, registry = setup(reader, clock)
    slot = loop.add(reader, timeout=60)
    await loop.sample(slot)
    pending = asyncio.create_task(loop.sample(slot))
    await asyncio.sleep(0)  # the read is now parked on the gate
    assert not pending.done()
    # collect() is synchronous: it cannot await the hung read, only copy what is held.
    assert registry.get_sample_value("poolscope_host_cpus",
                                     {"proxy_id": "proxy-a", "instance_id": "inst-1",
                                      "source": "test"}) == 5
    gate.set()
    await pending


async def test_a_hung_read_times_out_and_is_waited_on_not_restarted() -> None:
    gate = asyncio.Event()
    reader = ScriptedReader(gate, 9)
    loop, registry = setup(reader, Clock())
    slot = loop.add(reader, timeout=0.01)
    await loop.sample(slot)
    await loop.sample(slot)  # still hung: no second read is started
    assert reader.outcomes == [9]
    assert slot.health.last_reason is ErrorReason.TIMEOUT
    assert registry.get_sample_value("poolscope_collector_errors_total",
                                     {**health("scripted"), "reason": "timeout"}) == 2
    gate.set()
    await loop.sample(slot)  # the hung read finally answers and counts
    assert slot.value == 1.0 and reader.outcomes == [9]
    await loop.sample(slot)
    assert slot.value == 9.0


async def test_a_look_again_that_hangs_past_freshness_is_a_failure_not_a_state() -> None:
    """A driver probe that hangs briefly keeps the collector unavailable; one that
    hangs past FRESH_S (nvmlInit on a wedged GPU) fails it, or the state would hide
    the hang for ever."""
    gate, clock = asyncio.Event(), Clock()
    reader = ScriptedReader(Unavailable(UnavailableReason.DRIVER_NOT_LOADED, "no driver"), gate)
    loop, registry = setup(reader, clock)
    slot = loop.add(reader, timeout=0.01)
    await loop.sample(slot)
    assert slot.health.unavailable_reason is UnavailableReason.DRIVER_NOT_LOADED
    await loop.sample(slot)  # the look again starts and hangs: still unavailable
    clock.now += FRESH_S - 1
    await loop.sample(slot)
    assert slot.health.success is None and slot.health.unavailable_reason is not None
    clock.now += 1
    await loop.sample(slot)
    assert slot.health.success is False and slot.health.last_reason is ErrorReason.TIMEOUT
    assert registry.get_sample_value("poolscope_collector_errors_total",
                                     {**health("scripted"), "reason": "timeout"}) == 1
    gate.set()


async def test_stop_abandons_a_hung_read() -> None:
    reader = ScriptedReader(asyncio.Event())
    loop, _ = setup(reader, Clock())
    slot = loop.add(reader, timeout=0.01)
    await loop.sample(slot)
    assert slot.pending is not None
    await loop.stop()
    assert slot.pending is None


async def test_a_read_ending_as_the_sample_is_cancelled_does_not_swallow_the_cancel() -> None:
    """stop() cancels each sampling task and waits for it: a read that ends in the same
    turn of the loop must not turn the cancellation into a sample taken, or the task
    samples on and stop() (and the exporter's SIGTERM) waits for ever."""
    read: asyncio.Future[float] = asyncio.get_running_loop().create_future()
    reader = ScriptedReader()
    reader.read = lambda: read  # type: ignore[method-assign]
    loop, _ = setup(reader, Clock())
    slot = loop.add(reader, timeout=5.0)
    task = asyncio.create_task(loop.sample(slot))
    await until(lambda: slot.pending is read, bool, "the read started")
    read.set_result(1.0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_an_unexpected_exception_is_internal_and_sampling_goes_on() -> None:
    reader = ScriptedReader(RuntimeError("bug"), 3)
    loop, _ = setup(reader, Clock())
    slot = loop.add(reader)
    await loop.sample(slot)
    assert slot.health.errors[ErrorReason.INTERNAL] == 1
    await loop.sample(slot)
    assert slot.value == 3


async def test_background_loop_samples_until_stopped(make_exporter: MakeExporter) -> None:
    exporter, registry = make_exporter(sample_interval=0.01)
    await exporter.start()
    gpu = exporter.gpu.health
    before = gpu.last_success_wall
    await until(lambda: gpu.last_success_wall, lambda t: t != before, "a background GPU sample")
    await exporter.stop()
    assert not exporter.loop._tasks
    assert registry.get_sample_value("poolscope_collector_success", health("gpu")) == 1


def test_a_board_without_optional_families_emits_only_what_it_has() -> None:
    board = HealthBoard(HealthFamilies(success=catalog.PROXY_COLLECTOR_SUCCESS,
                                       duration=catalog.PROXY_COLLECTOR_DURATION))
    board.add("queues", ()).succeeded(0.002)
    emitted = {m.name for m in board.families(["proxy-a", "proxy_queue"])}
    assert emitted == {"poolscope_proxy_collector_success",
                       "poolscope_proxy_collector_duration_seconds"}


async def test_a_sample_older_than_the_freshness_threshold_is_not_served() -> None:
    """A loop that stalls (no failure recorded, nothing new read) cannot keep serving
    its last sample as current: past FRESH_S it leaves the page, its age stays."""
    clock = Clock()
    board = HealthBoard(monotonic=clock)
    loop = SamplingLoop(1.0, board, monotonic=clock)
    slot = loop.add(ScriptedReader(7))
    await loop.sample(slot)
    registry = CollectorRegistry()
    registry.register(BoardCollector(board, loop))
    name = catalog.HOST_CPU_COUNT.name
    labels = {"proxy_id": "proxy-a", "instance_id": "inst-1", "source": "test"}
    fresh = loop.fresh()
    clock.now += FRESH_S
    assert registry.get_sample_value(name, labels) == 7.0
    assert loop.fresh() == fresh == (True,)
    clock.now += 0.001
    assert registry.get_sample_value(name, labels) is None
    assert loop.fresh() == (False,)  # so a cached page is rendered anew
    age = registry.get_sample_value(catalog.COLLECTOR_SAMPLE_AGE.name,
                                    {**labels, "source": "exporter", "collector": "scripted"})
    assert age == pytest.approx(FRESH_S + 0.001)
