"""deploy/prometheus/prometheus.yml: promtool accepts it from anywhere, and it
scrapes the way the rules assume (intervals, identity labels, honor_labels)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from deploy.demo.cluster import prometheus_config
from harness.prometheus import RULE_FILES, binary
from poolscope.contract.catalog import all_families
from tests.deploy.prometheus_config import (
    CONFIG,
    EXPORTER_JOBS,
    job,
    load,
    resolve,
    sd_files,
    seconds,
)
from tests.support.rules import fresh_threshold_s

# Scrapes a host sample may miss before the rules call it stale.
SCRAPES_PER_FRESHNESS = 3


def test_promtool_check_config_from_another_directory(tmp_path: Path) -> None:
    done = subprocess.run([binary("promtool"), "check", "config", str(CONFIG)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(RULE_FILES)} rule files found" in done.stdout


def test_rule_files_are_the_repositorys_rules() -> None:
    found = [p for pattern in load()["rule_files"] for p in resolve(pattern)]
    assert found == [p.resolve() for p in RULE_FILES]


def test_intervals_match_the_freshness_threshold() -> None:
    """FRESH_S in the rules is three scrape intervals: change one, change both."""
    config = load()["global"]
    interval = seconds(config["scrape_interval"])
    assert seconds(config["evaluation_interval"]) == interval
    assert seconds(config["scrape_timeout"]) < interval
    assert fresh_threshold_s() == SCRAPES_PER_FRESHNESS * interval
    assert all("scrape_interval" not in j for j in load()["scrape_configs"])


@pytest.mark.parametrize("name", [*EXPORTER_JOBS, "poolscope-proxy-bridge"])
def test_labelled_jobs_honor_the_exporters_labels(name: str) -> None:
    """Without honor_labels a target label proxy_id turns the exporter's into exported_proxy_id."""
    assert job(load(), name)["honor_labels"] is True


@pytest.mark.parametrize("name", EXPORTER_JOBS)
def test_relabelling_keeps_identity_and_drops_the_unidentified(name: str) -> None:
    relabel = job(load(), name)["relabel_configs"]
    keep = [r["regex"] for r in relabel if r["action"] == "labelkeep"]
    assert len(keep) == 1
    for label in (*EXPORTER_JOBS[name], "job", "instance", "__address__", "__metrics_path__"):
        assert re.fullmatch(keep[0], label), label
    assert not re.fullmatch(keep[0], "team")
    dropped = {r["source_labels"][0] for r in relabel
               if r["action"] == "drop" and r["regex"] == ""}
    assert dropped == set(EXPORTER_JOBS[name])


@pytest.mark.parametrize("name", EXPORTER_JOBS)
def test_metric_filter_keeps_every_catalog_series(name: str) -> None:
    """The keep filter on an exporter's page must not drop a series the rules could read;
    it drops the process_* series, which nothing reads (docs/scaling.md)."""
    [rule] = job(load(), name)["metric_relabel_configs"]
    assert rule["action"] == "keep" and rule["source_labels"] == ["__name__"]
    for family in all_families():
        suffixes = ("_bucket", "_sum", "_count") if family.kind == "histogram" else ("",)
        for suffix in suffixes:
            assert re.fullmatch(rule["regex"], family.name + suffix), family.name
    assert re.fullmatch(rule["regex"], "poolscope_build_info")
    for unread in ("process_cpu_seconds_total", "process_resident_memory_bytes",
                   "go_goroutines", "python_gc_objects_collected_total"):
        assert not re.fullmatch(rule["regex"], unread), unread


def test_the_demo_stores_what_the_deployment_stores(tmp_path: Path) -> None:
    """The demo's Prometheus (and every benchmark over it) filters each exporter job's
    series as the deployed job does, so what they count is what a deployment keeps."""
    demo = yaml.safe_load(prometheus_config(tmp_path, 1.0, [], {}).read_text())
    demo_jobs = {j["job_name"]: j for j in demo["scrape_configs"]}
    for name in EXPORTER_JOBS:
        assert demo_jobs[name]["metric_relabel_configs"] == \
            job(load(), name)["metric_relabel_configs"], name


@pytest.mark.parametrize("name", EXPORTER_JOBS)
def test_target_files_name_each_target(name: str) -> None:
    files = sd_files(job(load(), name))
    assert files, f"{name} has no example target file"
    identities = []
    for path in files:
        for group in json.loads(path.read_text()):
            labels = group["labels"]
            assert set(labels) == set(EXPORTER_JOBS[name]), path
            assert all(labels.values()), path
            if "instance_id" in labels:  # one Instance per target: a group's labels are shared
                assert len(group["targets"]) == 1, path
            identities.extend(tuple(sorted(labels.items())) for _ in group["targets"])
    if name == "poolscope-instance":
        assert len(identities) == len(set(identities))


def test_every_target_file_is_read_by_a_job() -> None:
    read = {p for j in load()["scrape_configs"] for p in sd_files(j)}
    shipped = {p.resolve() for p in (CONFIG.parent / "targets").rglob("*.json")}
    assert shipped == read
