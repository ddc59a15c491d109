"""How long the recording rules take at fleet scale, measured by Prometheus itself.

For each fleet size: a fleet target (bench.fleet_target) in its own process,
a real Prometheus scraping it every 5 s and evaluating the rules every 5 s.
Once every group has seen a full fleet, /api/v1/rules is polled twice per
interval for `--evaluations` intervals; every distinct evaluation (told apart
by its lastEvaluation) contributes its group's evaluationTime — the value
Prometheus also exports as prometheus_rule_group_last_duration_seconds — and
each rule's own evaluationTime, so one slow or lucky evaluation cannot stand
for the fleet size, and the rules that dominate are named.

The same box runs the scraper, the rule engine and the fleet target (and, on
a shared box, whatever else), and a group's evaluationTime is wall-clock time:
a descheduled rule looks slow. So the CPU each process used over the window is
reported beside the rule times, and so is the rules' own CPU: Prometheus' CPU
with the rules, minus its CPU over an equal window after a reload without them
(scraping unchanged). That difference, per 5 s interval, is what the rules
cost however busy the box is.

The target (issue 4): at 16,000 Instances every group together stays under 10%
of the 5 s interval, and the cost grows linearly with the fleet.

    python -m bench.rules_eval --instances 1000,4000,16000
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml

from tests.support.prometheus import (
    REPO,
    Prometheus,
    free_port,
    running_prometheus,
    stop_group,
    wait_http,
)

INTERVAL_S = 5.0
BUDGET_RATIO = 0.10
TOP_RULES = 8


@dataclass
class Usage:
    """CPU seconds a process used over a window, and its memory at the end."""

    process: psutil.Process
    cpu_start: float = 0.0
    cpu_s: float = 0.0
    rss_bytes: int = 0

    def begin(self) -> None:
        self.cpu_start = _cpu_seconds(self.process)

    def end(self) -> None:
        self.cpu_s = _cpu_seconds(self.process) - self.cpu_start
        self.rss_bytes = sum(p.memory_info().rss for p in _tree(self.process))


def _tree(process: psutil.Process) -> list[psutil.Process]:
    return [process, *process.children(recursive=True)]


def _cpu_seconds(process: psutil.Process) -> float:
    return sum(t.user + t.system for t in (p.cpu_times() for p in _tree(process)))


@dataclass
class Result:
    instances: int
    series: int  # TSDB head series, raw and recorded
    target_series: int  # what the fleet target serves
    window_s: float
    group_seconds: dict[str, list[float]] = field(default_factory=dict)
    rule_seconds: dict[str, list[float]] = field(default_factory=dict)
    cpu_cores: dict[str, float] = field(default_factory=dict)  # process -> cores used
    rss_gib: dict[str, float] = field(default_factory=dict)
    box_busy: float = 0.0  # share of all cores busy over the window
    rules_cpu_s: float = 0.0  # Prometheus CPU seconds per interval the rules add

    def group_mean(self, group: str) -> float:
        return statistics.fmean(self.group_seconds[group])

    @property
    def total_seconds(self) -> float:
        return sum(self.group_mean(g) for g in self.group_seconds)

    @property
    def ratio(self) -> float:
        return self.total_seconds / INTERVAL_S


def _fleet(instances: int, proxies: int, gpus: int, port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.fleet_target", f"--instances={instances}",
         f"--proxies={proxies}", f"--gpus-per-instance={gpus}", f"--port={port}"],
        stdout=subprocess.DEVNULL, start_new_session=True)


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.load(r)


def _scrape_config(port: int, paths: Sequence[str]) -> dict[str, object]:
    """One job, one target per fleet shard; honor_labels keeps the fleet's ids."""
    return {
        "job_name": "fleet",
        "scrape_interval": f"{INTERVAL_S:g}s",
        "scrape_timeout": f"{INTERVAL_S:g}s",
        "honor_labels": True,
        "static_configs": [{"targets": [f"127.0.0.1:{port}"],
                            "labels": {"__metrics_path__": p, "shard": p}} for p in paths],
    }


def _sample_rules(prom: Prometheus, result: Result, seen: dict[str, str]) -> None:
    """Record each group evaluation not seen yet, with its rules' own times."""
    for group in _get(f"{prom.url}/api/v1/rules")["data"]["groups"]:
        name = group["name"]
        if seen.get(name) == group["lastEvaluation"]:
            continue
        seen[name] = group["lastEvaluation"]
        result.group_seconds.setdefault(name, []).append(group["evaluationTime"])
        for i, rule in enumerate(group["rules"]):
            # Rules of one name (a state set) are told apart by position.
            key = f"{name} #{i:02d} {rule['name']}"
            result.rule_seconds.setdefault(key, []).append(rule["evaluationTime"])


def _cpu_cores(process: psutil.Process, seconds: float) -> float:
    start = _cpu_seconds(process)
    time.sleep(seconds)
    return (_cpu_seconds(process) - start) / seconds


def _drop_rules(prom: Prometheus) -> None:
    """Reload Prometheus with the same scrape jobs and no rule files."""
    path = prom.workdir / "prometheus.yml"
    config = yaml.safe_load(path.read_text())
    config["rule_files"] = []
    path.write_text(yaml.safe_dump(config))
    urllib.request.urlopen(urllib.request.Request(f"{prom.url}/-/reload", method="POST"),
                           timeout=60).close()
    deadline = time.monotonic() + 60
    while _get(f"{prom.url}/api/v1/rules")["data"]["groups"]:
        if time.monotonic() > deadline:
            raise TimeoutError("Prometheus kept its rules after a reload")
        time.sleep(0.5)


def _head_series(prom: Prometheus) -> int:
    """From Prometheus' own /metrics: it does not scrape itself here."""
    with urllib.request.urlopen(f"{prom.url}/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("prometheus_tsdb_head_series "):
                return int(float(line.split()[1]))
    raise RuntimeError("Prometheus exports no prometheus_tsdb_head_series")


def measure(instances: int, proxies: int, gpus: int, evaluations: int, workdir: Path,
            rule_files: Sequence[Path]) -> Result:
    """Run one fleet size until every target is up and rules are warm, then sample."""
    port = free_port()
    fleet = _fleet(instances, proxies, gpus, port)
    try:
        wait_http(f"http://127.0.0.1:{port}/targets", timeout=600)
        info = _get(f"http://127.0.0.1:{port}/targets")
        with running_prometheus(workdir, [_scrape_config(port, info["paths"])],
                                rule_files=rule_files,
                                evaluation_interval=f"{INTERVAL_S:g}s") as prom:
            assert prom.process is not None
            prom.wait_for(f'count(up == 1) == {len(info["paths"])}', timeout=600)
            # Rates need two scrapes and the pool groups read the instance
            # group's output: let every group see a full fleet before sampling.
            prom.wait_for("proxy_pool:requests:rate1m", timeout=600)
            time.sleep(3 * INTERVAL_S)
            usage = {"prometheus": Usage(psutil.Process(prom.process.pid)),
                     "fleet target": Usage(psutil.Process(fleet.pid))}
            result = Result(instances, 0, int(info["series"]), 0.0)
            seen: dict[str, str] = {}
            _sample_rules(prom, result, seen)  # the evaluation in progress is not timed
            result.group_seconds.clear()
            result.rule_seconds.clear()
            for u in usage.values():
                u.begin()
            box_start = psutil.cpu_times()
            started = time.monotonic()
            for _ in range(2 * evaluations):
                time.sleep(INTERVAL_S / 2)
                _sample_rules(prom, result, seen)
            result.window_s = time.monotonic() - started
            box = psutil.cpu_times()
            busy = sum(box) - sum(box_start) - (box.idle - box_start.idle)
            result.box_busy = busy / (sum(box) - sum(box_start))
            for name, u in usage.items():
                u.end()
                result.cpu_cores[name] = u.cpu_s / result.window_s
                result.rss_gib[name] = u.rss_bytes / 2**30
            result.series = _head_series(prom)
            _drop_rules(prom)
            time.sleep(INTERVAL_S)
            scrape_only = _cpu_cores(usage["prometheus"].process, result.window_s)
            result.rules_cpu_s = (result.cpu_cores["prometheus"] - scrape_only) * INTERVAL_S
        return result
    finally:
        stop_group(fleet)


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def table(results: Sequence[Result]) -> str:
    """Per-group mean seconds, share of the interval, series per Instance, CPU and memory."""
    groups = sorted({g for r in results for g in r.group_seconds})
    head = ["Instances", "head series", "series / Instance", *groups, "all groups", "of 5 s",
            "evals", "rules CPU / 5 s", "Prometheus CPU", "target CPU", "box busy",
            "Prometheus RSS"]
    rows = [_row(head), "|" + "---|" * len(head)]
    for r in results:
        rows.append(_row([
            f"{r.instances:,}", f"{r.series:,}", f"{r.series / r.instances:.1f}",
            *(f"{r.group_mean(g) * 1000:.1f} ms" if g in r.group_seconds else "-"
              for g in groups),
            f"{r.total_seconds * 1000:.1f} ms", f"{r.ratio:.1%}",
            str(min(len(v) for v in r.group_seconds.values())),
            f"{r.rules_cpu_s * 1000:.0f} ms ({r.rules_cpu_s / INTERVAL_S:.1%})",
            f"{r.cpu_cores['prometheus']:.2f} cores", f"{r.cpu_cores['fleet target']:.2f} cores",
            f"{r.box_busy:.0%} of {psutil.cpu_count()}",
            f"{r.rss_gib['prometheus']:.1f} GiB"]))
    return "\n".join(rows)


def rule_table(result: Result, top: int = TOP_RULES) -> str:
    """The rules that cost most at one fleet size, mean evaluationTime each."""
    means = sorted(((statistics.fmean(v), k) for k, v in result.rule_seconds.items()),
                   reverse=True)
    rows = [_row([f"rule at {result.instances:,} Instances", "mean", "share"]), "|---|---|---|"]
    total = sum(m for m, _ in means)
    rows += [_row([f"`{k}`", f"{m * 1000:.1f} ms", f"{m / total:.0%}"]) for m, k in means[:top]]
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", default="1000,4000,16000",
                        help="comma-separated fleet sizes")
    parser.add_argument("--instances-per-proxy", type=int, default=100)
    parser.add_argument("--gpus-per-instance", type=int, default=2)
    parser.add_argument("--evaluations", type=int, default=20,
                        help="rule evaluation intervals sampled per fleet size (mean reported)")
    parser.add_argument("--rules", type=Path, default=REPO / "rules",
                        help="directory of rule files (to compare against another version)")
    parser.add_argument("--top-rules", type=int, default=TOP_RULES,
                        help="slowest rules listed per fleet size")
    args = parser.parse_args(argv)
    rule_files = sorted(args.rules.resolve().glob("*.yml"))
    results = []
    for n in (int(x) for x in args.instances.split(",")):
        with tempfile.TemporaryDirectory(prefix="poolscope-rules-eval-") as tmp:
            result = measure(n, max(1, n // args.instances_per_proxy), args.gpus_per_instance,
                             args.evaluations, Path(tmp), rule_files)
        print(f"{n} Instances: {result.total_seconds * 1000:.1f} ms ({result.ratio:.1%}), "
              f"rules CPU {result.rules_cpu_s * 1000:.0f} ms per interval, "
              f"box {result.box_busy:.0%} busy",
              file=sys.stderr, flush=True)
        results.append(result)
    print(table(results))
    for r in results:
        print()
        print(rule_table(r, args.top_rules))
    return 0 if all(r.ratio < BUDGET_RATIO for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
