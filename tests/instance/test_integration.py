"""A real Prometheus scrapes a real exporter process in front of a vLLM page."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.polling import eventually
from harness.prometheus import (
    binary,
    free_port,
    running_prometheus,
    scrape_config,
    stop_group,
    wait_http,
)
from harness.static_http import serving_fixture

pytestmark = pytest.mark.integration


@pytest.fixture
def vllm_endpoint() -> Iterator[str]:
    with serving_fixture("vllm") as url:
        yield url


@pytest.fixture
def exporter(vllm_endpoint: str, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    log = (tmp_path / "exporter.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "poolscope.exporters.instance", "--instance-id", "inst-7",
         "--proxy-id", "pool-a", "--listen", f"127.0.0.1:{port}",
         "--engine-metrics-url", vllm_endpoint, "--sample-interval", "0.5"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz")
        yield f"127.0.0.1:{port}"
    finally:
        stop_group(proc)
        log.close()
    assert proc.returncode == 0, (tmp_path / "exporter.log").read_text()


def test_prometheus_receives_engine_series_with_identity_labels(
        exporter: str, tmp_path: Path) -> None:
    with running_prometheus(tmp_path / "prom", [scrape_config("instance", [exporter])],
                            rule_files=()) as prom:
        running = prom.wait_for('poolscope_engine_requests_running{source="engine:vllm"}')
        assert running[0]["metric"]["instance_id"] == "inst-7"
        assert running[0]["metric"]["proxy_id"] == "pool-a"
        assert float(running[0]["value"][1]) == 37
        kv = prom.wait_for("poolscope_engine_kv_cache_usage_ratio")
        assert float(kv[0]["value"][1]) == pytest.approx(0.8123)
        assert prom.wait_for('poolscope_collector_success{collector="engine"} == 1')
        assert prom.wait_for('poolscope_instance_admission_state{state="saturated"} == 1')
        assert prom.targets_up() == {exporter: 1.0}


def scrape(exporter: str) -> bytes:
    with urllib.request.urlopen(f"http://{exporter}/metrics", timeout=10) as r:
        return bytes(r.read())


def test_promtool_check_metrics_is_clean(exporter: str) -> None:
    # The exporter serves before its first engine read is in: wait for that sample.
    text = eventually(lambda: scrape(exporter),
                      lambda t: b"poolscope_engine_requests_running" in t, 10,
                      "the first engine sample on /metrics")
    result = subprocess.run([binary("promtool"), "check", "metrics"], input=text,
                            capture_output=True, timeout=60, text=False)
    assert result.returncode == 0, (result.stdout + result.stderr).decode()
