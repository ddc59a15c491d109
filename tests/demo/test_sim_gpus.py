"""The demo's simulated GPUs, read through the real NVML collector: they follow the
engine's load, one fails now and then, and an engine that stops answering freezes
them rather than zeroing them."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry

from deploy.demo.gpu_exporter import (
    EngineLoad,
    LoadFollowingNvml,
    gpu_spec,
    gpus_of,
    read_engine,
)
from harness.static_http import FIXTURES, serving
from poolscope.exporters.instance.service import InstanceExporter, Settings
from tests.support.clock import Clock

IDS = {"proxy_id": "pool-1", "instance_id": "pool-1-inst-1", "source": "nvml"}
H100 = "NVIDIA H100 80GB HBM3"


class Load:
    def __init__(self, load: EngineLoad | None) -> None:
        self.load = load

    def __call__(self) -> EngineLoad | None:
        return self.load


async def sampled(exporter: InstanceExporter) -> CollectorRegistry:
    await exporter.loop.sample_all()
    return exporter.registry()


def gpu_values(registry: CollectorRegistry, name: str) -> dict[str, float]:
    return {s.labels["gpu"]: s.value for m in registry.collect() for s in m.samples
            if s.name == name}


Rig = tuple[LoadFollowingNvml, Load, Clock, InstanceExporter]


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    """Four H100s following a scripted load, GPU 1 flaky; the exporter stopped after."""
    load, clock = Load(EngineLoad(0.5, 0.4)), Clock()
    nvml = LoadFollowingNvml(gpus_of(gpu_spec(f"{H100}:4"), "pool-1-inst-1"), load,
                             flaky=1, flaky_period_s=90.0, clock=clock)
    exporter = InstanceExporter(Settings("pool-1-inst-1", "pool-1"), nvml=nvml.module())
    yield nvml, load, clock, exporter
    await exporter.stop()


async def test_utilisation_and_memory_follow_the_engine(rig: Rig) -> None:
    nvml, load, _, exporter = rig
    nvml.refresh()
    half = gpu_values(await sampled(exporter), "poolscope_gpu_utilization_ratio")
    load.load = EngineLoad(1.0, 0.9)
    nvml.refresh()
    registry = await sampled(exporter)
    full = gpu_values(registry, "poolscope_gpu_utilization_ratio")
    assert set(full) == set(half) == {"0", "1", "2", "3"}
    assert all(0.4 < half[g] < 0.55 < 0.85 < full[g] <= 1.0 for g in half)
    used = gpu_values(registry, "poolscope_gpu_memory_used_bytes")
    total = gpu_values(registry, "poolscope_gpu_memory_total_bytes")
    assert all(0.35 < used[g] / total[g] < 1.0 for g in used)
    assert registry.get_sample_value("poolscope_instance_gpus",
                                     {**IDS, "gpu_model": H100, "health": "healthy"}) == 4


async def test_the_flaky_gpu_is_unhealthy_in_its_window_and_then_recovers(rig: Rig) -> None:
    nvml, _, clock, exporter = rig
    nvml.refresh()
    assert set(gpu_values(await sampled(exporter), "poolscope_gpu_healthy").values()) == {1.0}
    clock.now += 90.0 * 3 + 70  # in the last third of a period
    registry = await sampled(exporter)
    assert gpu_values(registry, "poolscope_gpu_healthy") == {
        "0": 1.0, "1": 0.0, "2": 1.0, "3": 1.0}
    assert "1" not in gpu_values(registry, "poolscope_gpu_utilization_ratio")
    assert registry.get_sample_value("poolscope_instance_gpus",
                                     {**IDS, "gpu_model": H100, "health": "unhealthy"}) == 1
    clock.now += 30  # the next period's first third
    registry = await sampled(exporter)
    assert set(gpu_values(registry, "poolscope_gpu_healthy").values()) == {1.0}


async def test_an_engine_that_stops_answering_freezes_the_gpus_never_zeroes(rig: Rig) -> None:
    nvml, load, _, exporter = rig
    nvml.refresh()
    before = gpu_values(await sampled(exporter), "poolscope_gpu_utilization_ratio")
    load.load = None
    nvml.refresh()
    after = gpu_values(await sampled(exporter), "poolscope_gpu_utilization_ratio")
    assert after == before and min(after.values()) > 0


def test_the_engine_load_is_read_from_a_real_vllm_page() -> None:
    with serving((FIXTURES / "vllm.txt").read_bytes()) as url:
        load = read_engine(url, max_running=64)
    assert load == EngineLoad(37 / 64, 0.8123)


def test_a_dead_engine_reads_as_no_load() -> None:
    assert read_engine("http://127.0.0.1:9/metrics", max_running=8) is None


@pytest.mark.parametrize("bad", ["H100", "H100:0", ":2", "H100:two"])
def test_a_bad_gpu_spec_is_refused(bad: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        gpu_spec(bad)


def test_two_models_with_distinct_uuids_per_instance() -> None:
    gpus = gpus_of(gpu_spec("NVIDIA L40S:2,NVIDIA L4:1"), "i-1")
    assert [g.name for g in gpus] == ["NVIDIA L40S", "NVIDIA L40S", "NVIDIA L4"]
    assert len({g.uuid for g in gpus + gpus_of(gpu_spec("NVIDIA L4:3"), "i-2")}) == 6
    assert gpus[2].total == 24 * 2**30


@pytest.mark.parametrize(("flaky", "period"), [(4, 90.0), (-1, 90.0), (1, 0.0), (1, -6.0)])
def test_a_flaky_gpu_that_cannot_be_is_refused(flaky: int, period: float) -> None:
    with pytest.raises(ValueError):
        LoadFollowingNvml(gpus_of(gpu_spec(f"{H100}:4"), "i-1"), Load(None), flaky=flaky,
                          flaky_period_s=period)


def test_a_page_cut_short_reads_as_no_load() -> None:
    with serving(b"vllm:num_requests_running{engine=\"0\"} 3\nvllm:kv_cache_usage_perc{en") as url:
        assert read_engine(url, max_running=8) is None
