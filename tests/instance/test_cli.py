"""The command line, as a user runs it: a real process per case."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request

import pytest

from harness.commands import command_process
from harness.polling import eventually
from harness.prometheus import free_port, wait_http
from poolscope.contract.thresholds import FRESH_S
from poolscope.exporters.instance.config import parse
from poolscope.service.argtypes import UsageError

BASE = ["--instance-id", "i-1", "--proxy-id", "p-1"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "poolscope.exporters.instance", *args],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args", [
    [*BASE, "--listen", "nonsense"],
    [*BASE, "--listen", "127.0.0.1:99999"],
    [*BASE, "--sample-interval", "0"],
    [*BASE, "--sample-interval", "-1"],
    [*BASE, "--engine-timeout", "nan"],
    [*BASE, "--capacity", "-3"],
    [*BASE, "--engine", "mlc-llm"],
    [*BASE, "--engine-metrics-url", "localhost:8000/metrics"],
    # llama.cpp's router would load the model for every read.
    [*BASE, "--engine-metrics-url", "http://127.0.0.1:8080/metrics?model=m&autoload=true"],
    [*BASE, "--admission-kv-degraded", "0.99", "--admission-kv-saturated", "0.5"],
    ["--proxy-id", "p-1"],
], ids=["listen", "port", "interval-zero", "interval-negative", "timeout-nan", "capacity",
        "engine", "url", "router-autoload", "thresholds", "no-instance-id"])
def test_invalid_flags_exit_2_with_one_line(args: list[str]) -> None:
    result = run(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "error" in lines[0], result.stderr


def test_defaults_are_loopback_and_one_second() -> None:
    config = parse(BASE)
    assert (config.listen.host, config.listen.port) == ("127.0.0.1", 10100)
    assert config.settings.sample_interval == 1.0
    assert parse([*BASE, "--listen", "[::1]:9300"]).listen.url() == "http://[::1]:9300"


def test_runs_drains_on_sigusr1_and_exits_0_on_sigterm() -> None:
    port = free_port()
    with command_process("poolscope.exporters.instance", *BASE,
                         "--listen", f"127.0.0.1:{port}") as proc:
        wait_http(f"http://127.0.0.1:{port}/healthz")
        proc.send_signal(signal.SIGUSR1)
        url = f"http://127.0.0.1:{port}/v1/resource/snapshot"

        def admission_state() -> str:
            with urllib.request.urlopen(url, timeout=5) as r:
                return str(json.load(r)["capacity_hint"]["admission_state"])

        # 30 s: generous, CI may be busy; not a timing check.
        eventually(admission_state, lambda state: state == "draining", 30, "draining after SIGUSR1")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def test_busy_port_exits_1() -> None:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        result = run(*BASE, "--listen", f"127.0.0.1:{s.getsockname()[1]}")
    assert result.returncode == 1
    assert "cannot listen" in result.stderr


def test_a_sample_interval_past_the_freshness_threshold_is_refused() -> None:
    """A sample older than FRESH_S is not served: sampling less often would blank the
    host series between two samples, so the exporter refuses to start that way."""
    with pytest.raises(UsageError, match="--sample-interval"):
        parse([*BASE, "--sample-interval", str(FRESH_S + 1)])
    assert parse([*BASE, "--sample-interval", str(FRESH_S)]).settings.sample_interval == FRESH_S
