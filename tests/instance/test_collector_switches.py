"""`--collector.NAME` / `--no-collector.NAME`, as node_exporter's: auto-detection by
default, a collector switched off leaves no series and no health series behind."""

from __future__ import annotations

import subprocess
import sys

import pytest
from prometheus_client import CollectorRegistry

from poolscope.exporters.instance.config import COLLECTORS, parse
from poolscope.exporters.instance.service import Settings
from poolscope.service.argtypes import UsageError
from tests.instance.conftest import EngineServer, MakeExporter, fixture_text, health

BASE = ["--instance-id", "i-1", "--proxy-id", "p-1"]
URL = ["--engine-metrics-url", "http://127.0.0.1:9/metrics"]


def of(registry: CollectorRegistry, collector: str) -> set[str]:
    """The families with a sample about `collector`: its health, by its label."""
    return {s.name for m in registry.collect() for s in m.samples
            if s.labels.get("collector") == collector}


def starting(registry: CollectorRegistry, prefix: str) -> set[str]:
    return {s.name for m in registry.collect() for s in m.samples if s.name.startswith(prefix)}


def test_every_collector_has_both_switches_and_auto_by_default() -> None:
    assert set(COLLECTORS) == {"host", "gpu", "engine"}
    auto = parse([*BASE, *URL]).settings
    assert (auto.host_collector, auto.gpu_collector, auto.engine_collector) == (None, None, None)
    on = parse([*BASE, *URL, "--collector.host", "--collector.gpu", "--collector.engine"])
    assert (on.settings.host_collector, on.settings.gpu_collector,
            on.settings.engine_collector) == (True, True, True)
    off = parse([*BASE, *URL, "--no-collector.gpu", "--no-collector.engine"])
    assert (off.settings.gpu_collector, off.settings.engine_collector) == (False, False)


def test_the_host_collector_cannot_be_left_out() -> None:
    """The pool rules read the host collector's health as the Instance's heartbeat."""
    with pytest.raises(UsageError, match=r"--no-collector\.host"):
        parse([*BASE, "--no-collector.host"])


def test_engine_collector_without_a_url_exits_2_naming_both_flags() -> None:
    result = subprocess.run([sys.executable, "-m", "poolscope.exporters.instance", *BASE,
                             "--collector.engine"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert "--collector.engine" in line and "--engine-metrics-url" in line, line


def test_settings_refuse_an_engine_collector_with_nothing_to_read() -> None:
    with pytest.raises(ValueError, match="engine_metrics_url"):
        Settings(instance_id="i-1", proxy_id="p-1", engine_collector=True)


async def test_no_engine_collector_reads_no_engine(engine_server: EngineServer,
                                                   make_exporter: MakeExporter) -> None:
    engine_server.body = fixture_text("vllm")
    exporter, registry = make_exporter(engine_metrics_url=engine_server.url,
                                       engine_collector=False)
    await exporter.loop.sample_all()
    assert engine_server.requests == 0
    assert starting(registry, "poolscope_engine_") == set()
    assert of(registry, "engine") == set()
    assert registry.get_sample_value("poolscope_collector_success", health("host")) == 1


async def test_engine_collector_forced_on_reads_the_engine(engine_server: EngineServer,
                                                           make_exporter: MakeExporter) -> None:
    engine_server.body = fixture_text("vllm")
    exporter, registry = make_exporter(engine_metrics_url=engine_server.url,
                                       engine_collector=True)
    await exporter.loop.sample_all()
    assert registry.get_sample_value("poolscope_collector_success", health("engine")) == 1
    assert "poolscope_engine_requests_running" in starting(registry, "poolscope_engine_")


async def test_no_host_collector_has_no_host_series_and_no_health(
        make_exporter: MakeExporter) -> None:
    exporter, registry = make_exporter(host_collector=False)
    await exporter.loop.sample_all()
    assert starting(registry, "poolscope_host_") == set()
    assert of(registry, "host") == set()
    assert registry.get_sample_value("poolscope_collector_success", health("gpu")) == 1
