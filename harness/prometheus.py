"""A real Prometheus for tests: Debian's binary on a free loopback port.

Tests use the same rule files and scrape the same exporters as production; the
only thing made up here is the port.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from deploy.demo.processes import ProcessGroup, port_or_free, stop_group, wait_ready
from harness.polling import eventually

__all__ = ["free_port", "running_prometheus", "scrape_config", "stop_group", "wait_http"]

REPO = Path(__file__).resolve().parents[1]
RULE_FILES = sorted((REPO / "rules").glob("*.yml"))


# Debian renames a few upstream binaries; a test asks by the upstream name, so that an
# upstream tarball on PATH works as well as `make setup`'s Debian package.
DEBIAN_NAMES = {"alertmanager": "prometheus-alertmanager"}


def binary(name: str) -> str:
    """NAME_BIN when set (PROMETHEUS_BIN, ALERTMANAGER_BIN, VICTORIA_METRICS_BIN...),
    else `name` on PATH, else its Debian name."""
    env = os.environ.get(f"{name.upper().replace('-', '_')}_BIN")
    found = env or shutil.which(name) or shutil.which(DEBIAN_NAMES.get(name, name))
    if not found:
        raise RuntimeError(f"{name} not found: run `make setup` (installs Debian's packages)")
    return found


def free_port() -> int:
    return port_or_free(0)


def wait_http(url: str, timeout: float = 30.0) -> None:
    """Block until `url` answers 200, or raise with the last error."""
    wait_ready(url, timeout=timeout)


@dataclass
class Prometheus:
    """The HTTP API of a Prometheus; `process` is set when this test started it."""

    url: str
    workdir: Path
    process: subprocess.Popen[bytes] | None = None

    def query(self, promql: str, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query; returns the result vector, raises on an API error."""
        params = {"query": promql}
        if at is not None:
            params["time"] = repr(at)
        return self._get("/api/v1/query", params)["result"]

    def cutoffs_seen_at(self, at: float, inputs: Sequence[str]) -> list[float]:
        """The instants whose data a rule evaluation at `at` may have seen.

        A scrape is stamped when it starts and appended when it ends, so one that
        straddles `at` is in a later query at `at` but was not in the evaluation.
        Scrapes land in start order: the evaluation saw every sample of `inputs`
        up to some cutoff, either `at` itself or just before a recent sample.
        """
        stamps = {float(s["value"][1]) for name in inputs
                  for s in self.query(f"timestamp({name})", at=at)}
        return [at] + [t - 0.001 for t in sorted(stamps, reverse=True) if at - 1.0 < t <= at]

    def _get(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.load(r)
        if body.get("status") != "success":
            raise RuntimeError(f"{path} {params}: {body}")
        return body["data"]

    def targets_up(self) -> dict[str, float]:
        """`up` per scrape URL."""
        return {s["metric"]["instance"]: float(s["value"][1]) for s in self.query("up")}

    def wait_for(self, promql: str, timeout: float = 60.0) -> list[dict[str, Any]]:
        """Poll until the query returns a non-empty vector."""
        return eventually(lambda: self.query(promql), bool, timeout, f"{promql!r} returns a sample",
                          every=0.25)


def scrape_config(job: str, targets: Sequence[str], interval: str = "1s",
                  labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A static scrape job; honor_labels keeps the exporters' proxy_id/instance_id."""
    return {
        "job_name": job,
        "scrape_interval": interval,
        "scrape_timeout": interval,
        "honor_labels": True,
        "static_configs": [{"targets": list(targets), "labels": labels or {}}],
    }


@contextmanager
def serving(name: str, args: Sequence[str], workdir: Path,
            ready_url: str) -> Iterator[subprocess.Popen[bytes]]:
    """binary(name) with `args`, logging to workdir/NAME.log, once `ready_url` answers;
    its process group is stopped after, so nothing it started outlives the test."""
    group = ProcessGroup(workdir)
    child = group.start(name, [binary(name), *args])
    try:
        wait_ready(ready_url, child)
        yield child.process
    finally:
        group.stop()


@contextmanager
def running_prometheus(workdir: Path, scrape_configs: Sequence[dict[str, Any]],
                       rule_files: Sequence[Path] = RULE_FILES,
                       evaluation_interval: str = "1s", *, port: int | None = None,
                       alertmanagers: Sequence[str] = (), retention: str = "1h",
                       flags: Sequence[str] = ()) -> Iterator[Prometheus]:
    """Start Prometheus with these jobs and rules; stop its process group after.

    `port` when a job must scrape Prometheus itself (its address goes in the config
    before it starts); `alertmanagers` (host:port) receive its alerts. `retention`
    bounds what it keeps (a benchmark that backfills hours of history needs more than
    the tests' hour); `flags` are passed on as they are.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {
        "global": {"scrape_interval": "1s", "evaluation_interval": evaluation_interval},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": list(scrape_configs),
    }
    if alertmanagers:
        config["alerting"] = {"alertmanagers": [{"static_configs": [
            {"targets": list(alertmanagers)}]}]}
    config_path = workdir / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(config))
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    with serving("prometheus", [
            f"--config.file={config_path}", f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}", "--web.enable-lifecycle",
            f"--storage.tsdb.retention.time={retention}", *flags],
            workdir, f"{url}/-/ready") as proc:
        yield Prometheus(url, workdir, proc)


@dataclass
class History:
    """A Prometheus and a time just before it started: its whole history is later."""

    prom: Prometheus
    since: float

    def samples(self, selector: str) -> list[tuple[float, float]]:
        """Every stored sample of `selector`, as (timestamp, value), oldest first."""
        window = f"{int(time.time() - self.since) + 5}s"
        found = [(float(t), float(v)) for s in self.prom.query(f"{selector}[{window}]")
                 for t, v in s["values"]]
        return sorted((t, v) for t, v in found if t >= self.since)


@contextmanager
def recording(workdir: Path, scrape_configs: Sequence[dict[str, Any]]) -> Iterator[History]:
    """running_prometheus with the rule files, and the time before it started."""
    since = time.time()
    with running_prometheus(workdir, scrape_configs) as prom:
        yield History(prom, since)
