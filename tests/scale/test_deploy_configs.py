"""The scale-out configs in deploy/ say what docs/scaling.md promises: the same exporter
jobs as the single Prometheus, rules only where the raw series are, and a global
Prometheus that federates nothing but the pool rollups."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from harness.prometheus import REPO, binary
from harness.stacks import FEDERATION, VICTORIA, rehost, vm_flags
from poolscope.bridge.queries import FLEET_SERIES
from tests.dashboards.panels import DASHBOARD_FILES, variable_queries
from tests.dashboards.panels import load as load_dashboard

SINGLE = REPO / "deploy" / "prometheus" / "prometheus.yml"
EXPORTER_JOBS = ("poolscope-instance", "poolscope-proxy")


def load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def jobs(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {j["job_name"]: j for j in config["scrape_configs"]}


@pytest.mark.parametrize(("path", "evaluator"), [
    (FEDERATION / "region-prometheus.yml", "prometheus"), (VICTORIA / "scrape.yml", "vmalert")],
    ids=["region", "vmagent"])
def test_exporter_jobs_are_the_single_prometheus_ones(path: Path, evaluator: str) -> None:
    # A drift here would make a region (or VictoriaMetrics) roll up different series. Beside
    # them, the job that scrapes whatever evaluates the rules (PoolscopeRulesFailing reads it).
    single, scaled = jobs(load(SINGLE)), jobs(load(path))
    assert set(scaled) == {*EXPORTER_JOBS, evaluator}
    for name in EXPORTER_JOBS:
        assert scaled[name] == single[name], name


def place_labels() -> set[str]:
    """The labels the dashboards' place variables list: those whose "All" sends `.*`,
    because a single Prometheus has no such label and only federation adds it
    (dashboards/grafana.py, query_variable)."""
    place = {(path.stem, f"${v['name']}") for path in DASHBOARD_FILES
             for v in load_dashboard(path)["templating"]["list"] if v.get("allValue") == ".*"}
    return {q.ref for q in variable_queries() if (q.dashboard, q.panel) in place}


def test_region_runs_the_rules_as_the_single_prometheus_does() -> None:
    config = load(FEDERATION / "region-prometheus.yml")
    assert config["rule_files"] == load(SINGLE)["rule_files"]
    assert config["global"]["evaluation_interval"] == load(SINGLE)["global"]["evaluation_interval"]


def test_region_labels_its_series_with_what_the_dashboards_filter_on() -> None:
    # A label the dashboards list that no region sets leaves that variable empty; one a
    # region sets that no dashboard lists cannot be filtered on.
    labels = load(FEDERATION / "region-prometheus.yml")["global"]["external_labels"]
    assert {"region", "cluster"} <= set(labels)
    assert set(labels) == place_labels()
    assert all(isinstance(v, str) and v for v in labels.values()), labels


def test_global_targets_name_each_region_by_its_external_labels() -> None:
    # So that `up{job="poolscope-federate"}` names the region and cluster that went dark.
    labels = set(load(FEDERATION / "region-prometheus.yml")["global"]["external_labels"])
    files = sorted((FEDERATION / "targets" / "regions").glob("*.json"))
    assert files
    for path in files:
        for entry in json.loads(path.read_text()):
            assert set(entry["labels"]) == labels, (path.name, entry)


def test_global_federates_only_pool_rollups_and_runs_no_rules() -> None:
    """The rollups, and the series that says when they were written (the Scheduler
    bridge's probe reads it: bridge/queries.py)."""
    config = load(FEDERATION / "global-prometheus.yml")
    assert "rule_files" not in config
    (job,) = config["scrape_configs"]
    assert job["metrics_path"] == "/federate"
    assert job["params"] == {"match[]": [
        '{__name__=~"proxy_pool:.+",__name__!~"proxy_pool:.+:(last1m|max1m|rate5m)"}',
        f'{{__name__="{FLEET_SERIES}"}}']}
    assert job["honor_labels"] is True


@pytest.mark.parametrize("name", ["region-prometheus.yml", "global-prometheus.yml"])
def test_promtool_accepts_the_federation_configs(name: str) -> None:
    result = subprocess.run([binary("promtool"), "check", "config", str(FEDERATION / name)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_vmalert_runs_the_project_rules_at_the_scrape_interval() -> None:
    flags = dict(f.partition("=")[::2] for f in vm_flags("vmalert", {}))
    assert flags["-rule"] == "rules/*.yml"
    scrape = load(VICTORIA / "scrape.yml")["global"]["scrape_interval"]
    assert flags["-evaluationInterval"] == scrape


def test_overrides_replace_only_the_flags_they_name() -> None:
    flags = vm_flags("victoria-metrics", {"-httpListenAddr": "127.0.0.1:1"})
    assert flags[0] == "-httpListenAddr=127.0.0.1:1"
    assert flags[1:] == vm_flags("victoria-metrics", {})[1:]
    assert "-search.latencyOffset=1s" in flags


def test_url_overrides_move_the_address_and_keep_path_and_query() -> None:
    assert rehost("http://127.0.0.1:8428/api/v1/write", "http://127.0.0.1:1") == \
        "http://127.0.0.1:1/api/v1/write"
    assert rehost("/var/lib/vmagent", "/tmp/x") == "/tmp/x"
    flags = dict(f.partition("=")[::2] for f in vm_flags(
        "vmalert", {"-datasource.url": "http://127.0.0.1:1"}))
    assert flags["-datasource.url"] == "http://127.0.0.1:1?nocache=1"


def test_vmalert_reads_what_victoria_metrics_holds_now() -> None:
    # Without nocache=1 VM answers every rule evaluation as of now - latencyOffset
    # (1 s at least), and with the time aligned to the 5 s interval vmalert asks
    # for up to 5 s ago: both delays repeat at every layer of rules
    # (docs/scaling.md, "Propagation").
    flags = dict(f.partition("=")[::2] for f in vm_flags("vmalert", {}))
    assert parse_qs(urlsplit(flags["-datasource.url"]).query) == {"nocache": ["1"]}
    assert flags["-datasource.queryTimeAlignment"] == "false"
