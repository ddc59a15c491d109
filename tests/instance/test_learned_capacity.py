"""The learned capacity: no single bad or outlying sample can hold it up for good."""

from __future__ import annotations

import math

import pytest

from poolscope.exporters.common.health import ErrorReason
from poolscope.exporters.common.plausible import MAX_INSTANCE_REQUESTS
from poolscope.exporters.common.sampling import SampleError
from poolscope.exporters.instance.capacity import LEARN_STEP_S, LEARN_WINDOW_S, Capacity
from poolscope.exporters.instance.engine import EngineSample, interpret
from poolscope.exporters.instance.engines import VLLM
from tests.instance.conftest import EngineServer, MakeExporter, fixture_text, health, labels

RUNNING = ('vllm:num_requests_running{engine="0",model_name="meta-llama/'
           'Llama-3.1-8B-Instruct"} ')
CAPACITY = "poolscope_instance_capacity_requests"


def vllm_page(running: str) -> str:
    page = fixture_text("vllm")
    assert page.count(RUNNING + "37.0\n") == 1
    return page.replace(RUNNING + "37.0\n", RUNNING + running + "\n")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0 * LEARN_STEP_S  # on a step boundary, so the steps are exact

    def __call__(self) -> float:
        return self.now


def sample(running: float | None, request_success: float | None = None) -> EngineSample:
    return EngineSample("vllm", running, 0, 0.1, 0.1, request_success, None, None)


@pytest.mark.parametrize("running", ["1e12", str(MAX_INSTANCE_REQUESTS + 1), "2.5"])
def test_an_implausible_running_count_fails_the_engine_sample(running: str) -> None:
    with pytest.raises(SampleError) as err:
        interpret(vllm_page(running), VLLM)
    assert err.value.reason is ErrorReason.INVALID_VALUE
    assert "vllm:num_requests_running" in str(err.value)


def test_running_up_to_the_ceiling_is_read_and_over_it_summed_over_ranks_is_not() -> None:
    assert interpret(vllm_page(f"{MAX_INSTANCE_REQUESTS}.0"), VLLM).running \
        == MAX_INSTANCE_REQUESTS
    page = fixture_text("vllm_dp")
    for rank, running in (("0", "24.0"), ("1", "18.0")):
        line = RUNNING.replace('engine="0"', f'engine="{rank}"')
        assert page.count(line + running + "\n") == 1
        page = page.replace(line + running, line + str(MAX_INSTANCE_REQUESTS // 2 + 1))
    with pytest.raises(SampleError) as err:
        interpret(page, VLLM)
    assert err.value.reason is ErrorReason.INVALID_VALUE and "all ranks" in str(err.value)


async def test_one_absurd_running_sample_is_reported_and_never_becomes_the_capacity(
        engine_server: EngineServer, make_exporter: MakeExporter) -> None:
    engine_server.body = fixture_text("vllm")
    exporter, registry = make_exporter(engine_metrics_url=engine_server.url)
    await exporter.loop.sample_all()
    assert registry.get_sample_value(CAPACITY, labels("learned")) == 37
    engine_server.body = vllm_page("1e12")
    await exporter.loop.sample_all()
    assert registry.get_sample_value(CAPACITY, labels("learned")) is None
    assert registry.get_sample_value("poolscope_collector_success", health("engine")) == 0
    assert registry.get_sample_value("poolscope_collector_errors_total",
                                     health("engine", reason="invalid_value")) == 1
    engine_server.body = fixture_text("vllm")
    await exporter.loop.sample_all()
    assert registry.get_sample_value(CAPACITY, labels("learned")) == 37


async def test_a_duplicated_series_line_does_not_raise_the_learned_capacity(
        engine_server: EngineServer, make_exporter: MakeExporter) -> None:
    engine_server.body = fixture_text("vllm")
    exporter, registry = make_exporter(engine_metrics_url=engine_server.url)
    await exporter.loop.sample_all()
    # The same series again, ahead of the real line and far higher.
    engine_server.body = fixture_text("vllm").replace(RUNNING + "37.0\n",
                                                      RUNNING + "900\n" + RUNNING + "37.0\n")
    await exporter.loop.sample_all()
    assert registry.get_sample_value("poolscope_collector_errors_total",
                                     health("engine", reason="parse")) == 1
    engine_server.body = fixture_text("vllm")
    await exporter.loop.sample_all()
    assert registry.get_sample_value(CAPACITY, labels("learned")) == 37


def test_implausible_running_counts_never_move_the_mark() -> None:
    for start in (None, 5.0):
        capacity = Capacity(monotonic=FakeClock())
        if start is not None:
            capacity.observe(sample(start))
        for bad in (math.nan, -3.0, 2.5, 7.5, math.inf, 1e12, MAX_INSTANCE_REQUESTS + 1.0):
            capacity.observe(sample(bad))
            expected = None if start is None else (start, "learned")
            assert capacity.current() == expected, bad


def test_a_peak_stands_for_the_window_and_is_gone_after_it() -> None:
    clock = FakeClock()
    capacity = Capacity(monotonic=clock)
    capacity.observe(sample(8))
    start = clock.now
    while clock.now - start < LEARN_WINDOW_S:  # an hour of quiet, sampled each second
        clock.now += 1.0
        capacity.observe(sample(0))
        assert capacity.current() == (8, "learned"), clock.now - start
    clock.now = start + LEARN_WINDOW_S + LEARN_STEP_S
    assert capacity.current() is None  # no running request in the last hour: no evidence


def test_a_shrunk_deployment_lowers_the_mark_after_the_window() -> None:
    clock = FakeClock()
    capacity = Capacity(monotonic=clock)
    capacity.observe(sample(8))
    for _ in range(round(LEARN_WINDOW_S / LEARN_STEP_S) + 1):
        clock.now += LEARN_STEP_S
        capacity.observe(sample(3))
    assert capacity.current() == (3, "learned")
    # A whole day of samples keeps at most one peak per step of the window.
    for _ in range(24 * 3600):
        clock.now += 1.0
        capacity.observe(sample(3))
    assert len(capacity._peaks) <= LEARN_WINDOW_S / LEARN_STEP_S + 1


def test_an_engine_restart_empties_the_window() -> None:
    capacity = Capacity(monotonic=FakeClock())
    capacity.observe(sample(8, request_success=500))
    capacity.observe(sample(2, request_success=510))
    assert capacity.current() == (8, "learned")
    capacity.observe(sample(2, request_success=4))  # the counter started over
    assert capacity.current() == (2, "learned")
    capacity.observe(sample(1, request_success=None))  # a counter not read is no restart
    assert capacity.current() == (2, "learned")
    capacity.observe(sample(3, request_success=5))  # ... nor does it hide the next one
    capacity.observe(sample(1, request_success=None))
    capacity.observe(sample(1, request_success=2))
    assert capacity.current() == (1, "learned")
