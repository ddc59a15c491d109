"""GPUs through a fake NVML: several GPUs, one failing mid-run, NVML missing."""

from __future__ import annotations

import sys

import pytest

from exporters.common.health import ErrorReason
from exporters.common.sampling import SampleError
from exporters.instance import gpu as gpu_module
from exporters.instance.gpu import GpuReader
from tests.instance.conftest import MakeExporter, health, labels, names
from tests.instance.fakes import FakeNvml, three_gpus

GPU_USAGE = {"poolscope_gpu_utilization_ratio", "poolscope_gpu_memory_used_bytes",
             "poolscope_gpu_memory_total_bytes", "poolscope_gpu_power_watts",
             "poolscope_gpu_temperature_celsius"}
H100 = "NVIDIA H100 80GB HBM3"


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
    assert not {n for n in names(registry) if n.startswith("poolscope_gpu_")}
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
