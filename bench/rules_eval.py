"""How long the recording rules take at fleet scale, measured by Prometheus itself.

For each fleet size: a fleet target (bench.fleet_target) in its own process,
a real Prometheus scraping it every 5 s and evaluating rules/ every 5 s, then
Prometheus' own prometheus_rule_group_last_duration_seconds per group, read
from its /metrics over several evaluations. The target (issue 4): at 16,000
Instances every group together stays under 10% of the 5 s interval, and the
cost grows linearly with the fleet.

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
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.support.prometheus import (
    Prometheus,
    free_port,
    running_prometheus,
    stop_group,
    wait_http,
)

INTERVAL_S = 5.0
BUDGET_RATIO = 0.10


@dataclass(frozen=True)
class Result:
    instances: int
    series: int  # TSDB head series, raw and recorded
    target_series: int  # what the fleet target serves
    group_seconds: dict[str, float]  # median last duration per rule group

    @property
    def total_seconds(self) -> float:
        return sum(self.group_seconds.values())

    @property
    def ratio(self) -> float:
        return self.total_seconds / INTERVAL_S


def _fleet(instances: int, proxies: int, gpus: int, port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.fleet_target", f"--instances={instances}",
         f"--proxies={proxies}", f"--gpus-per-instance={gpus}", f"--port={port}"],
        stdout=subprocess.DEVNULL, start_new_session=True)


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.read().decode()


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


def _self_metrics(prom: Prometheus) -> tuple[dict[str, float], float]:
    """prometheus_rule_group_last_duration_seconds per group, and head series."""
    durations: dict[str, float] = {}
    head = 0.0
    for family in text_string_to_metric_families(_get(f"{prom.url}/metrics")):
        for s in family.samples:
            if s.name == "prometheus_rule_group_last_duration_seconds":
                durations[s.labels["rule_group"].rsplit(";", 1)[-1]] = s.value
            elif s.name == "prometheus_tsdb_head_series":
                head = s.value
    return durations, head


def measure(instances: int, proxies: int, gpus: int, evaluations: int,
            workdir: Path) -> Result:
    """Run one fleet size until every target is up and rules are warm, then sample."""
    port = free_port()
    fleet = _fleet(instances, proxies, gpus, port)
    try:
        wait_http(f"http://127.0.0.1:{port}/targets", timeout=300)
        info = json.loads(_get(f"http://127.0.0.1:{port}/targets"))
        with running_prometheus(workdir, [_scrape_config(port, info["paths"])],
                                evaluation_interval=f"{INTERVAL_S:g}s") as prom:
            prom.wait_for(f'count(up == 1) == {len(info["paths"])}', timeout=600)
            # Rates need two scrapes and the pool groups read the instance
            # group's output: let every group see a full fleet before sampling.
            prom.wait_for("proxy_pool:requests:rate1m", timeout=600)
            time.sleep(3 * INTERVAL_S)
            samples: dict[str, list[float]] = {}
            head = 0.0
            for _ in range(evaluations):
                durations, head = _self_metrics(prom)
                for group, seconds in durations.items():
                    samples.setdefault(group, []).append(seconds)
                time.sleep(INTERVAL_S)
        return Result(instances, int(head), int(info["series"]),
                      {g: statistics.median(v) for g, v in sorted(samples.items())})
    finally:
        stop_group(fleet)


def table(results: Sequence[Result]) -> str:
    """A markdown table: per-group seconds, series per Instance, share of the interval."""
    groups = sorted({g for r in results for g in r.group_seconds})
    head = ["Instances", "head series", "series / Instance", *groups, "all groups", "of 5 s"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        cells = [f"{r.instances:,}", f"{r.series:,}", f"{r.series / r.instances:.1f}",
                 *(f"{r.group_seconds.get(g, float('nan')) * 1000:.1f} ms" for g in groups),
                 f"{r.total_seconds * 1000:.1f} ms", f"{r.ratio:.1%}"]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", default="1000,4000,16000",
                        help="comma-separated fleet sizes")
    parser.add_argument("--instances-per-proxy", type=int, default=100)
    parser.add_argument("--gpus-per-instance", type=int, default=2)
    parser.add_argument("--evaluations", type=int, default=6,
                        help="rule evaluations sampled per fleet size (median reported)")
    args = parser.parse_args(argv)
    results = []
    for n in (int(x) for x in args.instances.split(",")):
        with tempfile.TemporaryDirectory(prefix="poolscope-rules-eval-") as tmp:
            result = measure(n, max(1, n // args.instances_per_proxy), args.gpus_per_instance,
                             args.evaluations, Path(tmp))
        print(f"{n} Instances: {result.total_seconds * 1000:.1f} ms ({result.ratio:.1%})",
              file=sys.stderr, flush=True)
        results.append(result)
    print(table(results))
    return 0 if all(r.ratio < BUDGET_RATIO for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
