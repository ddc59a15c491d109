"""deploy/prometheus/prometheus.yml in a real Prometheus: its jobs, file-based
discovery and relabelling, pointed at a real Instance exporter, demo Proxy and
Scheduler bridge on loopback, label the series the way the rules join them.

Only the target files and the bridge's address are rewritten (in a tmp copy);
the jobs are the deployed ones. The global intervals are the test harness's
(1 s, for a fast first scrape); test_prometheus_config checks the deployed 5 s.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from deploy.demo.processes import ProcessGroup, wait_ready
from harness.prometheus import Prometheus, free_port, running_prometheus
from tests.deploy.prometheus_config import load, resolve

pytestmark = pytest.mark.integration

PROXY_ID = "pool-live"
INSTANCE_ID = "pool-live-inst-1"
IDENTITY = {"job", "instance", "proxy_id", "instance_id"}


@dataclass
class Cluster:
    group: ProcessGroup
    exporter: str
    proxy: str
    bridge_port: int


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cluster and Prometheus for the module: each test reads a different answer."""
    return tmp_path_factory.mktemp("deploy-live")


@pytest.fixture(scope="module")
def cluster(workdir: Path) -> Iterator[Cluster]:
    group = ProcessGroup(workdir)
    exporter = f"127.0.0.1:{free_port()}"
    proxy = f"127.0.0.1:{free_port()}"
    try:
        child = group.start_python("exporter", "poolscope.exporters.instance", "--instance-id",
                                   INSTANCE_ID, "--proxy-id", PROXY_ID, "--listen", exporter)
        wait_ready(f"http://{exporter}/healthz", child)
        child = group.start_python("proxy", "deploy.demo.proxy", "--proxy-id", PROXY_ID,
                                   "--listen", proxy)
        wait_ready(f"http://{proxy}/healthz", child)
        yield Cluster(group, exporter, proxy, free_port())
    finally:
        group.stop()


def _deployed_jobs(targets: Path, cluster: Cluster, prometheus: str) -> list[dict[str, Any]]:
    """The deployed scrape jobs, reading target files under `targets`; the static ones
    point at this test's Scheduler bridge and at `prometheus` (itself)."""
    groups = {
        "instances": [
            # `team` is not an identity label: relabelling must drop it.
            {"targets": [cluster.exporter],
             "labels": {"proxy_id": PROXY_ID, "instance_id": INSTANCE_ID, "team": "x"}},
            # No instance_id: the rules could not place it, so it must not be scraped.
            {"targets": [cluster.exporter], "labels": {"proxy_id": PROXY_ID}},
        ],
        "proxies": [{"targets": [cluster.proxy], "labels": {"proxy_id": PROXY_ID}}],
        "proxy-bridges": [],
    }
    for directory, content in groups.items():
        (targets / directory).mkdir(parents=True)
        (targets / directory / "live.json").write_text(json.dumps(content))
    static_targets = {"poolscope-scheduler-bridge": f"127.0.0.1:{cluster.bridge_port}",
                      "prometheus": prometheus}
    jobs = copy.deepcopy(load()["scrape_configs"])
    for job in jobs:
        for sd in job.get("file_sd_configs", []):
            sd["files"] = [str(targets.parent / pattern) for pattern in sd["files"]]
        for static in job.get("static_configs", []):
            static["targets"] = [static_targets[job["job_name"]]]
    return jobs


@pytest.fixture(scope="module")
def prometheus(workdir: Path, cluster: Cluster) -> Iterator[Prometheus]:
    port = free_port()
    jobs = _deployed_jobs(workdir / "targets", cluster, f"127.0.0.1:{port}")
    rules = [p for pattern in load()["rule_files"] for p in resolve(pattern)]
    with running_prometheus(workdir / "prometheus", jobs, rule_files=rules,
                            port=port) as prom:
        bridge = cluster.group.start_python(
            "scheduler-bridge", "poolscope.scheduler_bridge", "--prometheus-url", prom.url,
            "--listen", f"127.0.0.1:{cluster.bridge_port}")
        wait_ready(f"http://127.0.0.1:{cluster.bridge_port}/healthz", bridge)
        yield prom


def _labels(series: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in series["metric"].items() if k != "__name__"}


def test_instance_exporter_is_up_with_its_identity(prometheus: Prometheus,
                                                    cluster: Cluster) -> None:
    [up] = prometheus.wait_for('up{job="poolscope-instance"} == 1')
    assert _labels(up) == {"job": "poolscope-instance", "instance": cluster.exporter,
                           "proxy_id": PROXY_ID, "instance_id": INSTANCE_ID}
    # The group without instance_id was dropped, not scraped under a second identity.
    assert len(prometheus.query('up{job="poolscope-instance"}')) == 1


def test_exporter_series_keep_their_labels(prometheus: Prometheus) -> None:
    [series] = prometheus.wait_for(
        'poolscope_collector_success{job="poolscope-instance", collector="host"}')
    labels = _labels(series)
    assert labels["proxy_id"] == PROXY_ID and labels["instance_id"] == INSTANCE_ID
    assert not [k for k in labels if k.startswith("exported_")]
    assert set(labels) == IDENTITY | {"source", "collector"}


def test_rules_roll_the_scraped_series_up(prometheus: Prometheus) -> None:
    [fresh] = prometheus.wait_for("proxy_pool:resource_freshness_seconds:max")
    assert _labels(fresh) == {"proxy_id": PROXY_ID, "source": "instance_exporter"}


def test_proxy_is_up(prometheus: Prometheus, cluster: Cluster) -> None:
    [up] = prometheus.wait_for('up{job="poolscope-proxy"} == 1')
    assert _labels(up) == {"job": "poolscope-proxy", "instance": cluster.proxy,
                           "proxy_id": PROXY_ID}


@pytest.mark.parametrize(("job", "series"), [
    ("poolscope-proxy", "poolscope_proxy_requests_total"),
    ("poolscope-instance", "poolscope_host_cpus")])
def test_exporter_jobs_store_only_poolscope_series(prometheus: Prometheus, job: str,
                                                   series: str) -> None:
    """The exporters' pages carry process_* too, which nothing reads: not stored."""
    prometheus.wait_for(f'{series}{{job="{job}"}}')
    names = {s["metric"]["__name__"]
             for s in prometheus.query(f'count by (__name__) ({{job="{job}"}})')}
    assert {n for n in names if not n.startswith(("poolscope_", "scrape_"))} == {"up"}


def test_scheduler_bridge_is_scraped(prometheus: Prometheus) -> None:
    prometheus.wait_for('up{job="poolscope-scheduler-bridge"} == 1')


def test_prometheus_scrapes_its_own_rule_evaluations(prometheus: Prometheus) -> None:
    """The alerts on failing rule groups read Prometheus' own series, from this job."""
    prometheus.wait_for('up{job="prometheus"} == 1')
    prometheus.wait_for('prometheus_rule_evaluation_failures_total{job="prometheus", '
                        'rule_group=~".+;poolscope[.]proxy_pool"}')
