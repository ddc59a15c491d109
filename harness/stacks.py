"""The scale-out configs in deploy/ run on loopback, over a demo cluster's exporters.

Each launcher reads the production file from deploy/ (deploy/federation/*.yml,
deploy/victoriametrics/*) and changes only what a loopback test must: ports, the
paths of target and data files, and the interval. Jobs, relabelling, match[] and the
flags' other values are the deployed ones, so the tests exercise what an operator
runs. Every process is started in a `ProcessGroup` and stopped by its group.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import yaml

from deploy.demo.cluster import Pool, instance_targets, prometheus_binary
from deploy.demo.processes import Child, ProcessGroup, port_or_free, wait_ready
from harness.prometheus import REPO, RULE_FILES, binary

FEDERATION = REPO / "deploy" / "federation"
VICTORIA = REPO / "deploy" / "victoriametrics"
# Lookback (the global Prometheus' --query.lookback-delta, VictoriaMetrics'
# -search.maxStalenessInterval) in intervals: global-prometheus.yml explains why 3.
LOOKBACK_INTERVALS = 3
VM_MIN_LOOKBACK_S = 10.0


def seconds(interval: float) -> str:
    return f"{interval:g}s"


def write_targets(targets: Path, pools: Sequence[Pool]) -> None:
    """file_sd files in deploy's layout (targets/instances, targets/proxies), these pools."""
    instances = instance_targets(pools)
    proxies = [{"targets": [pool.proxy_url.removeprefix("http://")],
                "labels": {"proxy_id": pool.proxy_id}} for pool in pools]
    for kind, entries in (("instances", instances), ("proxies", proxies)):
        (targets / kind).mkdir(parents=True, exist_ok=True)
        (targets / kind / "loopback.json").write_text(json.dumps(entries, indent=1))


def external_labels_of(config: Mapping[str, Any]) -> dict[str, str]:
    """What a Prometheus config attaches to every series it federates."""
    return dict(config["global"].get("external_labels", {}))


def region_labels(region: str) -> dict[str, str]:
    """region-prometheus.yml's external labels with region and cluster this simulated
    region's own: every label an operator's region sets reaches the global Prometheus,
    and one cluster per region makes the dashboards' Cluster filter separate pools as
    their Region filter does."""
    deployed = external_labels_of(
        yaml.safe_load((FEDERATION / "region-prometheus.yml").read_text()))
    return {**deployed, "region": region, "cluster": f"{region}-cluster"}


# What the backends must agree on: the recording rules. The alerts are proven by promtool
# and delivered in tests/integration; here, on a box running three backends at once at a
# 1 s interval, they would only add load (with every core busy VictoriaMetrics then went
# 90 s without a fresh pool).
RECORDING_RULES = [path for path in RULE_FILES
                   if all("record" in rule for group in yaml.safe_load(path.read_text())["groups"]
                          for rule in group["rules"])]


def render(source: Path, dest: Path, targets: Path, interval: float,
           external_labels: Mapping[str, str] | None = None) -> Path:
    """`source` with its intervals, target globs and rule files made loopback-local."""
    config: dict[str, Any] = yaml.safe_load(source.read_text())
    step = seconds(interval)
    glob = config.setdefault("global", {})
    glob.update(scrape_interval=step, scrape_timeout=step)
    if "evaluation_interval" in glob:
        glob["evaluation_interval"] = step
    if external_labels is not None:
        glob["external_labels"] = dict(external_labels)
    if "rule_files" in config:
        config["rule_files"] = [str(r) for r in RECORDING_RULES]
    # The exporter jobs only: the evaluator's self-scrape points at a default port, which
    # here is nobody's or another process's.
    config["scrape_configs"] = [j for j in config["scrape_configs"] if "file_sd_configs" in j]
    for job in config["scrape_configs"]:
        for sd in job.get("file_sd_configs", []):
            sd["files"] = [str(targets / Path(f).relative_to("targets")) for f in sd["files"]]
    dest.write_text(yaml.safe_dump(config, sort_keys=False))
    return dest


def start_prometheus(group: ProcessGroup, name: str, config: Path, data: Path,
                     *flags: str) -> tuple[str, Child]:
    port = port_or_free(0)
    url = f"http://127.0.0.1:{port}"
    child = group.start(name, [
        prometheus_binary(None), f"--config.file={config}", f"--storage.tsdb.path={data}",
        f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h", *flags])
    wait_ready(f"{url}/-/ready", child)
    return url, child


@dataclass(frozen=True)
class Federation:
    global_url: str
    regions: dict[str, Child]  # region name -> its Prometheus, to stop one in a test
    region_urls: dict[str, str]


@contextmanager
def federation(workdir: Path, regions: Mapping[str, Sequence[Pool]],
               interval: float) -> Iterator[Federation]:
    """A region Prometheus per entry of `regions` and the global one over them."""
    group = ProcessGroup(_mkdir(workdir / "logs"))
    try:
        urls: dict[str, str] = {}
        children: dict[str, Child] = {}
        for region, pools in regions.items():
            home = _mkdir(workdir / region)
            write_targets(home / "targets", pools)
            config = render(FEDERATION / "region-prometheus.yml", home / "prometheus.yml",
                            home / "targets", interval, region_labels(region))
            urls[region], children[region] = start_prometheus(
                group, f"prometheus-{region}", config, home / "data")
        home = _mkdir(workdir / "global")
        _mkdir(home / "targets" / "regions")
        # As targets/regions/example.json: each target labelled as its region labels
        # its series, so that `up` names the region and cluster that went dark.
        (home / "targets" / "regions" / "loopback.json").write_text(json.dumps(
            [{"targets": [url.removeprefix("http://")], "labels": region_labels(region)}
             for region, url in urls.items()]))
        config = render(FEDERATION / "global-prometheus.yml", home / "prometheus.yml",
                        home / "targets", interval)
        global_url, _ = start_prometheus(
            group, "prometheus-global", config, home / "data",
            f"--query.lookback-delta={seconds(LOOKBACK_INTERVALS * interval)}")
        yield Federation(global_url, children, urls)
    finally:
        group.stop()


def rehost(deployed: str, override: str) -> str:
    """A URL flag moves to the override's scheme and host:port and keeps the deployed
    path and query (`?nocache=1` on vmalert's datasource is a tuned setting, not an
    address); any other flag takes the override whole."""
    old = urlsplit(deployed)
    if old.scheme not in ("http", "https"):
        return override
    return urlunsplit((*urlsplit(override)[:2], *old[2:]))


def vm_flags(binary_name: str, overrides: Mapping[str, str]) -> list[str]:
    """deploy/victoriametrics/flags.yml's flags for one binary, `overrides` replacing
    the values of the flags they name (ports, paths, intervals; a URL only its
    address), in the file's order."""
    flags: list[str] = yaml.safe_load((VICTORIA / "flags.yml").read_text())[binary_name]
    out = []
    for flag in flags:
        name, _, value = flag.partition("=")
        out.append(f"{name}={rehost(value, overrides[name]) if name in overrides else value}")
    return out


@dataclass(frozen=True)
class Victoria:
    url: str  # VictoriaMetrics' Prometheus-compatible API (and /api/v1/write)
    vmalert_url: str


@contextmanager
def victoria_metrics(workdir: Path, pools: Sequence[Pool], interval: float) -> Iterator[Victoria]:
    """vmagent scrapes the pools and writes to a single-node VictoriaMetrics;
    vmalert evaluates the recording rules against it and writes the rollups back."""
    group = ProcessGroup(_mkdir(workdir / "logs"))
    # vmalert stamps every rollup of a group with the evaluation's start, and writes each
    # as its rule finishes: at the tests' 1 s interval, on two cores shared with the rest of
    # the suite, one evaluation can outlast three intervals, and a bridge asking at "now"
    # then finds no rollup at all. Deployed, 5 s intervals leave 15 s.
    step = seconds(interval)
    lookback = seconds(max(LOOKBACK_INTERVALS * interval, VM_MIN_LOOKBACK_S))
    try:
        vm_port, agent_port, alert_port = port_or_free(0), port_or_free(0), port_or_free(0)
        vm_url = f"http://127.0.0.1:{vm_port}"
        vm = group.start("victoria-metrics", [binary("victoria-metrics"), *vm_flags(
            "victoria-metrics", {"-httpListenAddr": f"127.0.0.1:{vm_port}",
                                 "-storageDataPath": str(workdir / "vm-data"),
                                 "-search.maxStalenessInterval": lookback})])
        wait_ready(f"{vm_url}/health", vm)
        write_targets(workdir / "targets", pools)
        scrape = render(VICTORIA / "scrape.yml", workdir / "scrape.yml", workdir / "targets",
                        interval)
        agent = group.start("vmagent", [binary("vmagent"), *vm_flags("vmagent", {
            "-httpListenAddr": f"127.0.0.1:{agent_port}", "-promscrape.config": str(scrape),
            "-remoteWrite.url": vm_url,
            "-remoteWrite.tmpDataPath": str(workdir / "vmagent-data")})])
        wait_ready(f"http://127.0.0.1:{agent_port}/health", agent)
        alert_url = f"http://127.0.0.1:{alert_port}"
        alert = group.start("vmalert", [binary("vmalert"), *vm_flags("vmalert", {
            "-httpListenAddr": f"127.0.0.1:{alert_port}",
            "-rule": ",".join(str(r) for r in RECORDING_RULES),
            "-datasource.url": vm_url, "-remoteWrite.url": vm_url,
            "-evaluationInterval": step,
            # No Alertmanager here: a free port, so that no alert reaches one an
            # operator runs on this machine at the default address.
            "-notifier.url": f"http://127.0.0.1:{port_or_free(0)}"})])
        wait_ready(f"{alert_url}/health", alert)
        yield Victoria(vm_url, alert_url)
    finally:
        group.stop()


@contextmanager
def scheduler_bridge(workdir: Path, backend: str, name: str,
                     *flags: str) -> Iterator[str]:
    """A Scheduler bridge over one backend's Prometheus API; its base URL."""
    group = ProcessGroup(_mkdir(workdir / "logs"))
    port = port_or_free(0)
    url = f"http://127.0.0.1:{port}"
    try:
        child = group.start_python(f"scheduler-bridge-{name}", "poolscope.scheduler_bridge",
                                   "--prometheus-url", backend,
                                   "--listen", f"127.0.0.1:{port}", *flags)
        wait_ready(f"{url}/healthz", child)
        yield url
    finally:
        group.stop()


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
