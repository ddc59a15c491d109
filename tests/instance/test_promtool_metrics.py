"""promtool's lint accepts the Instance exporter's page as served, with GPUs (fake
NVML) and an engine, and on a host without a driver: what operators run against
node_exporter and dcgm-exporter must find nothing to flag here either."""

from __future__ import annotations

import subprocess

import pytest
from aiohttp.test_utils import TestClient, TestServer

from harness.fake_gpus import NVML_ERROR_LIBRARY_NOT_FOUND, FakeGpu, FakeNvml, three_gpus
from harness.prometheus import binary
from poolscope.exporters.instance.server import make_app
from tests.instance.conftest import EngineServer, MakeExporter, fixture_text


async def served_page(make_exporter: MakeExporter, **kwargs: object) -> str:
    exporter, _ = make_exporter(**kwargs)
    await exporter.loop.sample_all()
    await exporter.loop.sample_all()  # a second round: network rates, learned capacity
    client = TestClient(TestServer(make_app(exporter)))
    await client.start_server()
    try:
        return await (await client.get("/metrics")).text()
    finally:
        await client.close()


def promtool_check(page: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([binary("promtool"), "check", "metrics"], input=page,
                          capture_output=True, text=True, timeout=60, check=False)


def two_models() -> FakeNvml:
    nvml = three_gpus()
    nvml.gpus.append(FakeGpu("GPU-dddd", "NVIDIA L4", util=30, total=24 * 2**30))
    return nvml


@pytest.mark.parametrize("host", ["gpus", "no-driver"])
async def test_promtool_finds_nothing_to_flag(engine_server: EngineServer,
                                              make_exporter: MakeExporter, host: str) -> None:
    engine_server.body = fixture_text("vllm")
    nvml = two_models() if host == "gpus" else FakeNvml(
        [], init_error=NVML_ERROR_LIBRARY_NOT_FOUND)
    page = await served_page(make_exporter, nvml=nvml, engine_metrics_url=engine_server.url)
    wanted = ("poolscope_instance_gpu_utilization_sum_ratio" if host == "gpus"
              else "poolscope_collector_unavailable_info")
    assert wanted in page  # the page holds what is under test
    result = promtool_check(page)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_promtool_flags_a_gauge_named_like_a_summary() -> None:
    """The check can fail, on a name as this exporter's GPU aggregates used to be."""
    page = ("# HELP poolscope_example_memory_used_bytes_sum Memory in use, summed.\n"
            "# TYPE poolscope_example_memory_used_bytes_sum gauge\n"
            "poolscope_example_memory_used_bytes_sum 1.0\n")
    result = promtool_check(page)
    assert result.returncode != 0 and "_sum" in result.stdout + result.stderr
