"""GPUs through a fake NVML: several GPUs, one failing mid-run, a host without a
driver (unavailable, not failing) or whose driver NVML refuses (failing), the
collector switches, and the per-model aggregates the pool rules read."""

from __future__ import annotations

import ctypes
import importlib
import logging
import math
import sys
import threading

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from harness import fake_gpus
from harness.fake_gpus import FakeGpu, FakeNvml, three_gpus
from harness.polling import until
from poolscope.contract import catalog
from poolscope.exporters.common.exposition import RoundCache
from poolscope.exporters.common.health import ErrorReason, UnavailableReason
from poolscope.exporters.common.sampling import SampleError, Unavailable
from poolscope.exporters.instance import gpu as gpu_module
from poolscope.exporters.instance.gpu import GpuReader
from tests.instance.conftest import MakeExporter, health, labels, names
from tests.support.clock import Clock

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


GPU_HEALTH_FAMILIES = ("poolscope_collector_success", "poolscope_collector_duration_seconds",
                       "poolscope_collector_last_success_timestamp_seconds",
                       "poolscope_collector_sample_age_seconds", "poolscope_collector_errors_total")
NO_DRIVER = [(fake_gpus.NVML_ERROR_LIBRARY_NOT_FOUND, "no_nvml_library"),
             (fake_gpus.NVML_ERROR_DRIVER_NOT_LOADED, "driver_not_loaded")]


def gpu_series(registry: CollectorRegistry) -> set[str]:
    return {n for n in names(registry)
            if n.startswith(("poolscope_gpu_", "poolscope_instance_gpu"))}


def gpu_health(registry: CollectorRegistry) -> set[str]:
    """The health families that carry a sample for the gpu collector."""
    return {s.name for m in registry.collect() for s in m.samples
            if s.labels.get("collector") == "gpu" and s.name.startswith(GPU_HEALTH_FAMILIES)}


def unavailable(registry: CollectorRegistry) -> dict[str, float]:
    """The unavailable-info samples, by collector/reason."""
    return {f"{s.labels['collector']}/{s.labels['reason']}": s.value
            for m in registry.collect() for s in m.samples
            if s.name == catalog.COLLECTOR_UNAVAILABLE.name}


@pytest.mark.parametrize(("code", "reason"), NO_DRIVER, ids=[r for _, r in NO_DRIVER])
async def test_a_host_without_a_driver_is_unavailable_not_failing(
        make_exporter: MakeExporter, code: int, reason: str) -> None:
    """A CPU-only host pages nobody: no success 0, no error counter, no GPU series
    (absent, never 0), one info series that says why."""
    exporter, registry = make_exporter(nvml=FakeNvml([], init_error=code))
    for _ in range(3):
        await exporter.loop.sample_all()
    assert gpu_series(registry) == set()
    assert gpu_health(registry) == set()
    assert unavailable(registry) == {f"gpu/{reason}": 1}
    assert registry.get_sample_value(catalog.COLLECTOR_UNAVAILABLE.name,
                                     health("gpu", reason=reason)) == 1
    assert registry.get_sample_value("poolscope_collector_success", health("host")) == 1
    assert "poolscope_host_memory_total_bytes" in names(registry)


async def test_a_host_without_a_driver_says_so_once(make_exporter: MakeExporter,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    """Reported once, at INFO: it is how the host is, not news every second."""
    caplog.set_level(logging.INFO, logger="poolscope.exporters.common.sampling")
    no_library = fake_gpus.NVML_ERROR_LIBRARY_NOT_FOUND
    exporter, _ = make_exporter(nvml=FakeNvml([], init_error=no_library))
    for _ in range(5):
        await exporter.loop.sample_all()
    said = [r for r in caplog.records if "collector gpu" in r.getMessage()]
    assert [(r.levelno, "unavailable (no_nvml_library)" in r.getMessage())
            for r in said] == [(logging.INFO, True)]


@pytest.mark.parametrize(("code", "gpu_collector"), [
    # The host has a driver, so most likely GPUs that nobody measures.
    (fake_gpus.NVML_ERROR_NO_PERMISSION, None),
    (fake_gpus.NVML_ERROR_LIB_RM_VERSION_MISMATCH, None),
    # No driver, but --collector.gpu says GPUs are expected.
    (fake_gpus.NVML_ERROR_LIBRARY_NOT_FOUND, True),
], ids=["no-permission", "version-mismatch", "gpus-asked-for"])
async def test_a_driver_nvml_refuses_or_gpus_asked_for_make_a_failure(
        make_exporter: MakeExporter, code: int, gpu_collector: bool | None) -> None:
    exporter, registry = make_exporter(nvml=FakeNvml([], init_error=code),
                                       gpu_collector=gpu_collector)
    await exporter.loop.sample_all()
    await exporter.loop.sample_all()
    assert gpu_series(registry) == set()
    assert unavailable(registry) == {}
    assert registry.get_sample_value("poolscope_collector_success", health("gpu")) == 0
    assert registry.get_sample_value("poolscope_collector_errors_total",
                                     health("gpu", reason="nvml_unavailable")) == 2


async def test_a_driver_with_no_gpu_is_a_measured_zero(make_exporter: MakeExporter) -> None:
    exporter, registry = make_exporter(nvml=FakeNvml([]))
    await exporter.loop.sample_all()
    assert registry.get_sample_value("poolscope_gpu_devices", labels("nvml")) == 0
    assert registry.get_sample_value("poolscope_collector_success", health("gpu")) == 1
    assert unavailable(registry) == {}


async def test_a_driver_loaded_later_is_found_at_the_next_detection(
        make_exporter: MakeExporter) -> None:
    """Detection is retried every REDETECT_S, not at every sample."""
    nvml = FakeNvml(three_gpus().gpus, init_error=fake_gpus.NVML_ERROR_DRIVER_NOT_LOADED)
    clock = Clock()
    exporter, registry = make_exporter(gpu=GpuReader(nvml.module(), monotonic=clock))
    await exporter.loop.sample_all()
    nvml.init_error = None  # the driver is loaded now
    clock.now += gpu_module.REDETECT_S - 1
    for _ in range(3):
        await exporter.loop.sample_all()
    assert nvml.inits == 1
    assert unavailable(registry) == {"gpu/driver_not_loaded": 1}
    assert gpu_series(registry) == set()
    clock.now += 1
    await exporter.loop.sample_all()
    assert nvml.inits == 2
    assert unavailable(registry) == {}
    assert registry.get_sample_value("poolscope_gpu_devices", labels("nvml")) == 3
    assert registry.get_sample_value("poolscope_collector_success", health("gpu")) == 1
    # Its error counters start at a measured 0 now that it is measuring.
    assert registry.get_sample_value("poolscope_collector_errors_total",
                                     health("gpu", reason="nvml_unavailable")) == 0


class SlowToDetect(FakeNvml):
    """A driver probe that hangs until released, as nvmlInit can on a busy host."""

    def __init__(self) -> None:
        super().__init__([], init_error=fake_gpus.NVML_ERROR_DRIVER_NOT_LOADED)
        self.hold = threading.Event()
        self.hold.set()
        self.probing = threading.Event()

    def _init(self) -> None:
        self.probing.set()
        self.hold.wait(30)
        super()._init()


async def test_a_slow_redetection_keeps_the_host_unavailable_not_failing(
        make_exporter: MakeExporter) -> None:
    nvml, clock = SlowToDetect(), Clock()
    exporter, registry = make_exporter(gpu=GpuReader(nvml.module(), monotonic=clock),
                                       sample_interval=1.0)
    await exporter.loop.sample_all()
    assert unavailable(registry) == {"gpu/driver_not_loaded": 1}
    nvml.hold.clear()  # the next probe hangs past the slot's timeout
    nvml.probing.clear()
    clock.now += gpu_module.REDETECT_S
    await exporter.loop.sample_all()
    assert nvml.probing.is_set()  # the look again started, and outlived the sample
    assert unavailable(registry) == {"gpu/driver_not_loaded": 1}
    assert registry.get_sample_value("poolscope_collector_success", health("gpu")) is None
    assert registry.get_sample_value("poolscope_collector_errors_total",
                                     health("gpu", reason="timeout")) is None
    nvml.hold.set()
    await until(exporter.loop.sample_all, lambda _: nvml.inits == 2, "the probe answered")
    assert unavailable(registry) == {"gpu/driver_not_loaded": 1}
    assert registry.get_sample_value("poolscope_collector_success", health("gpu")) is None


async def test_no_gpu_collector_has_no_series_and_no_health(make_exporter: MakeExporter) -> None:
    nvml = three_gpus()
    exporter, registry = make_exporter(nvml=nvml, gpu_collector=False)
    await exporter.loop.sample_all()
    assert gpu_series(registry) == set()
    assert gpu_health(registry) == set()
    assert unavailable(registry) == {}
    assert nvml.inits == 0
    assert registry.get_sample_value("poolscope_collector_success", health("host")) == 1


@pytest.mark.parametrize("required", [False, True], ids=["auto", "required"])
async def test_default_nvml_path_without_the_library(monkeypatch: pytest.MonkeyPatch,
                                                     required: bool) -> None:
    monkeypatch.setattr(gpu_module, "NVML_LIBRARY", "libdoes-not-exist.so.1")
    if required:
        with pytest.raises(SampleError) as failed:
            await GpuReader(required=True).read()
        assert failed.value.reason is ErrorReason.NVML_UNAVAILABLE
    else:
        with pytest.raises(Unavailable) as state:
            await GpuReader().read()
        assert state.value.reason is UnavailableReason.NO_NVML_LIBRARY


@pytest.mark.parametrize("required", [False, True], ids=["auto", "required"])
async def test_a_driver_without_pynvml_is_a_failure(monkeypatch: pytest.MonkeyPatch,
                                                    required: bool) -> None:
    """nvidia-ml-py is a dependency: missing beside a driver, the install is broken."""
    monkeypatch.setattr(gpu_module.ctypes, "CDLL", lambda name: object())
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    with pytest.raises(SampleError) as err:
        await GpuReader(required=required).read()
    assert err.value.reason is ErrorReason.NVML_UNAVAILABLE


async def test_real_pynvml_without_the_library_is_unavailable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped path: pynvml's own nvmlInit, its own error values."""
    try:
        ctypes.CDLL(gpu_module.NVML_LIBRARY)
    except OSError:
        pass
    else:
        pytest.skip("this host has NVIDIA's driver library")
    importlib.import_module("pynvml")  # first: it binds ctypes' CDLL, patched next, as it imports
    monkeypatch.setattr(gpu_module.ctypes, "CDLL", lambda name: object())  # pass the probe
    with pytest.raises(Unavailable) as state:
        await GpuReader().read()
    assert state.value.reason is UnavailableReason.NO_NVML_LIBRARY
    assert "nvmlInit" in state.value.detail


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


def test_the_catalog_lists_every_unavailable_reason() -> None:
    """The `reason` label stays bounded: the catalog's list is the health vocabulary."""
    assert tuple(r.value for r in UnavailableReason) == catalog.UNAVAILABLE_REASONS
    for reason in catalog.UNAVAILABLE_REASONS:
        assert reason in catalog.COLLECTOR_UNAVAILABLE.help
