"""GPUs through a fake NVML: several GPUs, one failing mid-run, NVML missing, and the
per-model aggregates the pool rules read."""

from __future__ import annotations

import math
import sys

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from poolscope.exporters.common import catalog
from poolscope.exporters.common.exposition import RoundCache
from poolscope.exporters.common.health import ErrorReason
from poolscope.exporters.common.sampling import SampleError
from poolscope.exporters.instance import gpu as gpu_module
from poolscope.exporters.instance.gpu import GpuReader
from tests.instance.conftest import MakeExporter, health, labels, names
from tests.instance.fakes import FakeGpu, FakeNvml, three_gpus

GPU_USAGE = {"poolscope_gpu_utilization_ratio", "poolscope_gpu_memory_used_bytes",
             "poolscope_gpu_memory_total_bytes", "poolscope_gpu_power_watts",
             "poolscope_gpu_temperature_celsius"}
H100 = "NVIDIA H100 80GB HBM3"
L4 = "NVIDIA L4"
GiB = 2**30
AGGREGATES = (catalog.INSTANCE_GPU_UTILIZATION_SUM, catalog.INSTANCE_GPU_UTILIZATION_MAX,
              catalog.INSTANCE_GPU_MEMORY_USED_SUM, catalog.INSTANCE_GPU_MEMORY_TOTAL_SUM)


def gpu(index: int, uuid: str) -> dict[str, str]:
    return labels("nvml", gpu=str(index), gpu_uuid=uuid, gpu_model=H100)


async def test_every_gpu_is_reported_with_identity_labels(make_exporter: MakeExporter) -> None:
    exporter, registry = make_exporter(nvml=three_gpus())
    await exporter.loop.sample_all()
    assert registry.get_sample_value("poolscope_gpu_devices", labels("nvml")) == 3
    for index, uuid, util in ((0, "GPU-aaaa", 0.10), (1, "GPU-bbbb", 0.55), (2, "GPU-cccc", 0.99)):
        assert registry.get_sample_value("poolscope_gpu_healthy", gpu(index, uuid)) == 1
        assert registry.get_sample_value("poolscope_gpu_utilization_ratio",
                                         gpu(index, uuid)) == pytest.approx(util)
    assert registry.get_sample_value("poolscope_gpu_memory_total_bytes",
                                     gpu(0, "GPU-aaaa")) == 80 * 2**30
    assert registry.get_sample_value("poolscope_gpu_power_watts", gpu(0, "GPU-aaaa")) == 300
    assert registry.get_sample_value("poolscope_gpu_temperature_celsius", gpu(1, "GPU-bbbb")) == 60


async def test_missing_sensor_is_absent_without_failing_the_gpu(
        make_exporter: MakeExporter) -> None:
    exporter, registry = make_exporter(nvml=three_gpus())
    await exporter.loop.sample_all()
    assert registry.get_sample_value("poolscope_gpu_power_watts", gpu(2, "GPU-cccc")) is None
    assert registry.get_sample_value("poolscope_gpu_healthy", gpu(2, "GPU-cccc")) == 1
    assert registry.get_sample_value("poolscope_collector_errors_total",
                                     health("gpu", reason="nvml_read")) == 0


async def test_one_gpu_failing_mid_run_goes_unhealthy_and_the_others_continue(
        make_exporter: MakeExporter) -> None:
    nvml = three_gpus()
    exporter, registry = make_exporter(nvml=nvml)
    await exporter.loop.sample_all()
    nvml.failing.add(1)
    nvml.gpus[0].util = 70
    await exporter.loop.sample_all()
    assert registry.get_sample_value("poolscope_gpu_healthy", gpu(1, "GPU-bbbb")) == 0
    for family in GPU_USAGE:
        assert registry.get_sample_value(family, gpu(1, "GPU-bbbb")) is None, family
    assert registry.get_sample_value("poolscope_gpu_utilization_ratio",
                                     gpu(0, "GPU-aaaa")) == pytest.approx(0.70)
    assert registry.get_sample_value("poolscope_gpu_devices", labels("nvml")) == 3
    assert registry.get_sample_value("poolscope_collector_success", health("gpu")) == 1
    assert registry.get_sample_value("poolscope_collector_errors_total",
                                     health("gpu", reason="nvml_read")) == 1


@pytest.mark.parametrize("nvml", [FakeNvml([], init_error=True)], ids=["init-fails"])
async def test_without_nvml_there_are_no_gpu_series_at_all(
        make_exporter: MakeExporter, nvml: FakeNvml) -> None:
    exporter, registry = make_exporter(nvml=nvml)
    await exporter.loop.sample_all()
    assert not {n for n in names(registry)
                if n.startswith(("poolscope_gpu_", "poolscope_instance_gpu"))}
    assert registry.get_sample_value("poolscope_collector_success", health("gpu")) == 0
    assert registry.get_sample_value("poolscope_collector_errors_total",
                                     health("gpu", reason="nvml_unavailable")) == 1
    assert "poolscope_host_memory_total_bytes" in names(registry)


@pytest.mark.parametrize("missing", ["library", "module"])
async def test_default_nvml_path_without_driver_or_module_is_nvml_unavailable(
        monkeypatch: pytest.MonkeyPatch, missing: str) -> None:
    if missing == "library":
        monkeypatch.setattr(gpu_module, "NVML_LIBRARY", "libdoes-not-exist.so.1")
    else:
        monkeypatch.setattr(gpu_module.ctypes, "CDLL", lambda name: object())
        monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    with pytest.raises(SampleError) as err:
        await GpuReader().read()
    assert err.value.reason is ErrorReason.NVML_UNAVAILABLE


async def test_nvml_is_shut_down_on_stop(make_exporter: MakeExporter) -> None:
    nvml = three_gpus()
    exporter, _ = make_exporter(nvml=nvml)
    await exporter.loop.sample_all()
    await exporter.stop()
    assert nvml.shutdowns == 1


# --- per-model aggregates ------------------------------------------------------

def model(name: str, **extra: str) -> dict[str, str]:
    return labels("nvml", gpu_model=name, **extra)


def aggregates(registry: CollectorRegistry, name: str) -> dict[str, float | None]:
    """Every per-model aggregate of one model, by family name (None: absent)."""
    return {f.name: registry.get_sample_value(f.name, model(name)) for f in AGGREGATES}


def counts(registry: CollectorRegistry, name: str) -> tuple[float | None, float | None]:
    return tuple(registry.get_sample_value(catalog.INSTANCE_GPUS.name, model(name, health=h))
                 for h in catalog.GPU_HEALTH)  # type: ignore[return-value]


def assert_no_nan(registry: CollectorRegistry) -> None:
    values = [s.value for m in registry.collect() for s in m.samples
              if s.name.startswith("poolscope_instance_gpu")]
    assert values and all(math.isfinite(v) for v in values), values


def two_h100_and_an_l4() -> FakeNvml:
    return FakeNvml([
        FakeGpu("GPU-aaaa", H100, util=20, used=30 * GiB),
        FakeGpu("GPU-bbbb", H100, util=60, used=50 * GiB),
        FakeGpu("GPU-cccc", L4, util=90, used=6 * GiB, total=24 * GiB),
    ])


async def test_aggregates_sum_the_healthy_gpus_of_each_model(
        make_exporter: MakeExporter) -> None:
    exporter, registry = make_exporter(nvml=two_h100_and_an_l4())
    await exporter.loop.sample_all()
    assert counts(registry, H100) == (2, 0)
    assert counts(registry, L4) == (1, 0)
    assert aggregates(registry, H100) == pytest.approx({
        catalog.INSTANCE_GPU_UTILIZATION_SUM.name: 0.80,
        catalog.INSTANCE_GPU_UTILIZATION_MAX.name: 0.60,
        catalog.INSTANCE_GPU_MEMORY_USED_SUM.name: 80 * GiB,
        catalog.INSTANCE_GPU_MEMORY_TOTAL_SUM.name: 160 * GiB})
    assert aggregates(registry, L4) == pytest.approx({
        catalog.INSTANCE_GPU_UTILIZATION_SUM.name: 0.90,
        catalog.INSTANCE_GPU_UTILIZATION_MAX.name: 0.90,
        catalog.INSTANCE_GPU_MEMORY_USED_SUM.name: 6 * GiB,
        catalog.INSTANCE_GPU_MEMORY_TOTAL_SUM.name: 24 * GiB})
    assert_no_nan(registry)


async def test_an_unhealthy_gpu_is_counted_but_in_no_sum(make_exporter: MakeExporter) -> None:
    nvml = three_gpus()
    exporter, registry = make_exporter(nvml=nvml)
    await exporter.loop.sample_all()
    nvml.failing.add(2)  # the busiest (99%) one: the max must fall back to 55%
    await exporter.loop.sample_all()
    assert counts(registry, H100) == (2, 1)
    assert aggregates(registry, H100) == pytest.approx({
        catalog.INSTANCE_GPU_UTILIZATION_SUM.name: 0.65,
        catalog.INSTANCE_GPU_UTILIZATION_MAX.name: 0.55,
        catalog.INSTANCE_GPU_MEMORY_USED_SUM.name: 20 * GiB,
        catalog.INSTANCE_GPU_MEMORY_TOTAL_SUM.name: 160 * GiB})
    assert_no_nan(registry)


async def test_a_model_whose_gpus_all_fail_has_counts_and_no_sums(
        make_exporter: MakeExporter) -> None:
    nvml = two_h100_and_an_l4()
    exporter, registry = make_exporter(nvml=nvml)
    await exporter.loop.sample_all()
    nvml.failing.add(2)
    await exporter.loop.sample_all()
    assert counts(registry, L4) == (0, 1)  # a measured 0 healthy
    assert aggregates(registry, L4) == dict.fromkeys(
        (f.name for f in AGGREGATES), None)  # not used, not free: absent, no fake 0
    assert counts(registry, H100) == (2, 0)
    assert aggregates(registry, H100)[catalog.INSTANCE_GPU_MEMORY_TOTAL_SUM.name] == 160 * GiB
    assert_no_nan(registry)


async def test_a_gpu_never_read_is_counted_unhealthy_under_an_empty_model(
        make_exporter: MakeExporter) -> None:
    """Its model is unknown, as on its poolscope_gpu_healthy series; it is never
    filed under another model's counts."""
    nvml = two_h100_and_an_l4()
    nvml.failing.add(2)
    exporter, registry = make_exporter(nvml=nvml)
    await exporter.loop.sample_all()
    assert counts(registry, "") == (0, 1)
    assert counts(registry, L4) == (None, None)
    assert counts(registry, H100) == (2, 0)


async def test_the_served_page_shows_a_gpu_failing_on_the_next_sample(
        make_exporter: MakeExporter) -> None:
    """The aggregates are cached with the rest of the sampled part of the page
    (poolscope.exporters.common.exposition), so a GPU sample must invalidate them too."""
    nvml = three_gpus()
    exporter, _ = make_exporter(nvml=nvml)
    await exporter.loop.sample_all()
    cache = RoundCache(exporter.round_key, exporter.sampled_families,
                       exporter.scrape_time_families)

    def healthy_count() -> list[float]:
        wanted = model(H100, health="healthy")
        return [s.value for f in text_string_to_metric_families(cache.page().decode())
                for s in f.samples if s.name == catalog.INSTANCE_GPUS.name and s.labels == wanted]

    assert healthy_count() == [3]
    nvml.failing.add(0)
    await exporter.loop.sample(exporter.gpu)
    assert healthy_count() == [2]
