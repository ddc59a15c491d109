"""The rates an exporter states over its own last minute (exporters/common/window_rate.py):
what the pool rules read for network throughput and the engines' QPS. They keep the
rules' promise, a rate only over a covered window, without Prometheus' help."""

from __future__ import annotations

import pytest

from harness.fake_gpus import FakePsutil, NicIo, cpu
from poolscope.contract import catalog
from poolscope.contract.thresholds import RATE_WINDOW_S
from poolscope.exporters.common.window_rate import WindowRate
from poolscope.exporters.instance.engine import EngineSample
from poolscope.exporters.instance.host import HostReader
from poolscope.exporters.instance.success_rate import SuccessRate
from poolscope.service.identity import Identity

IDS = Identity("proxy-a", "inst-1")


def fed(rate: WindowRate, start: float, stop: float, step: float, per_s: float,
        base: float = 0.0) -> list[float | None]:
    """Feeds a counter growing `per_s` from `start` to `stop`; the rate after each sample."""
    seen = []
    t = start
    while t <= stop + 1e-9:
        rate.observe(t, base + per_s * (t - start))
        seen.append(rate.rate())
        t += step
    return seen


def test_no_rate_until_the_window_is_covered_then_exact() -> None:
    rate = WindowRate()
    seen = fed(rate, 0, 120, 1, 250.0)
    # 52 s of samples (the window less RATE_EDGE_S) before the first rate.
    assert seen[:52] == [None] * 52
    assert all(v == pytest.approx(250.0) for v in seen[52:])


def test_a_counter_reset_starts_the_window_over_and_is_never_negative() -> None:
    rate = WindowRate()
    fed(rate, 0, 90, 1, 100.0, base=1e6)
    after = fed(rate, 91, 200, 1, 100.0, base=10.0)  # the engine restarted: 10, 110, ...
    assert after[:52] == [None] * 52
    assert all(v == pytest.approx(100.0) for v in after[52:])


@pytest.mark.parametrize("step", [5.0, 12.5, 15.0])
def test_a_sampling_interval_that_does_not_divide_the_window_still_spans_it(step: float) -> None:
    rate = WindowRate()
    seen = fed(rate, 0, 600, step, 40.0)
    assert seen[-1] == pytest.approx(40.0)
    steady = seen[int(80 // step):]
    assert steady and all(v == pytest.approx(40.0) for v in steady)


def test_a_gap_in_the_samples_is_not_averaged_over() -> None:
    rate = WindowRate()
    fed(rate, 0, 100, 1, 10.0)
    # Three minutes of failed reads, then the counter is read again: 10/s was the old
    # rate; since the gap it runs at 50/s. The span across the gap is refused.
    after = fed(rate, 280, 400, 1, 50.0, base=1000.0 + 10.0 * 180)
    assert after[:60] == [None] * 60
    assert all(v == pytest.approx(50.0) for v in after[60:])


def test_a_failed_read_leaves_the_window_as_it_is() -> None:
    rate = WindowRate()
    fed(rate, 0, 70, 1, 3.0)
    rate.observe(71, None)
    assert rate.rate() == pytest.approx(3.0)


def _host(nics: list[dict[str, NicIo]]) -> tuple[HostReader, list[float]]:
    clock = [0.0]
    psutil = FakePsutil(cpu=[cpu(100 + i, 300 + i) for i in range(len(nics))], nics=nics)
    return HostReader(psutil.module(), monotonic=lambda: clock[0]), clock


async def test_the_host_states_its_network_rates_once_covered() -> None:
    samples = [{"lo": NicIo(9 * t, 9 * t), "eth0": NicIo(100 * t, 1000 * t),
                "eth1": NicIo(0, 500 * t)} for t in range(0, 70)]
    reader, clock = _host(samples)
    rates = []
    for t in range(70):
        clock[0] = float(t)
        sample = await reader.read()
        rates.append(sample.network_rx_rate)
        families = {m.name: m for m in reader.families(sample, IDS)}
    assert rates[:52] == [None] * 52
    rx = families[catalog.HOST_NETWORK_RECEIVE_RATE.name].samples
    tx = families[catalog.HOST_NETWORK_TRANSMIT_RATE.name].samples
    # Loopback left out; the NICs summed into one series per Instance.
    assert [(s.labels, s.value) for s in rx] == [
        ({"proxy_id": "proxy-a", "instance_id": "inst-1", "source": "psutil"},
         pytest.approx(1500.0))]
    assert [s.value for s in tx] == [pytest.approx(100.0)]


async def test_another_set_of_interfaces_starts_the_host_window_over() -> None:
    before = [{"eth0": NicIo(10 * t, 10 * t)} for t in range(0, 60)]
    after = [{"eth0": NicIo(10 * t, 10 * t), "wg0": NicIo(0, 5 * t)} for t in range(60, 120)]
    reader, clock = _host(before + after)
    rates = []
    for t in range(120):
        clock[0] = float(t)
        rates.append((await reader.read()).network_rx_rate)
    assert rates[59] == pytest.approx(10.0)
    # wg0 appears at 60 s with 300 bytes already counted: no jump, no rate until covered.
    assert rates[60:112] == [None] * 52
    assert rates[112] == pytest.approx(15.0)


async def test_a_host_with_only_loopback_states_no_rate() -> None:
    reader, clock = _host([{"lo": NicIo(t, t)} for t in range(0, 70)])
    for t in range(70):
        clock[0] = float(t)
        sample = await reader.read()
    names = {m.name for m in reader.families(sample, IDS)}
    assert catalog.HOST_NETWORK_RECEIVE_RATE.name not in names  # unmeasured, not 0


def _engine(success: float | None, engine: str = "vllm") -> EngineSample:
    return EngineSample(engine=engine, running=1, waiting=0, kv_cache_usage=None,
                        kv_cache_usage_max=None, request_success=success,
                        prompt_tokens=None, generation_tokens=None)


def _success_rate_after(samples: list[EngineSample]) -> list[list[tuple[str, float]]]:
    clock = [0.0]
    rate = SuccessRate(monotonic=lambda: clock[0])
    stated = []
    for t, sample in enumerate(samples):
        clock[0] = float(t)
        rate.observe(sample)
        stated.append([(s.labels["source"], s.value) for m in rate.families(IDS)
                       for s in m.samples])
    return stated


def test_the_engines_success_rate_is_stated_with_the_engines_source() -> None:
    stated = _success_rate_after([_engine(4.0 * t) for t in range(60)])
    assert stated[51] == []
    assert stated[52] == [("engine:vllm", pytest.approx(4.0))]


def test_another_engine_behind_the_url_starts_the_success_rate_over() -> None:
    stated = _success_rate_after([_engine(4.0 * t) for t in range(60)]
                                 + [_engine(1e6 + 2.0 * t, "sglang") for t in range(60, 120)])
    assert stated[59] == [("engine:vllm", pytest.approx(4.0))]
    assert stated[60:112] == [[]] * 52  # its counter is higher, yet no jump is a rate
    assert stated[112] == [("engine:sglang", pytest.approx(2.0))]


def test_a_model_unloaded_from_the_sum_is_no_rate_not_a_negative_or_zero_one() -> None:
    """A router's models are summed: an unloaded model's requests leave the counter,
    which then falls, and the window starts over rather than state a rate across it."""
    stated = _success_rate_after([_engine(2.0 * t + 3.0 * t) for t in range(61)]
                                 + [_engine(2.0 * 61)])
    assert stated[60] == [("engine:vllm", pytest.approx(5.0))]
    assert stated[61] == []


def test_a_window_fed_for_a_day_holds_one_window_of_points() -> None:
    window = WindowRate()
    for t in range(86_400):
        window.observe(float(t), float(t))
    assert len(window._points) <= RATE_WINDOW_S + 2  # one point a second
    assert window.rate() == 1.0
