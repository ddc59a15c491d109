"""`poolscope-status --json` against the real stack: demo cluster, Prometheus with the
project's rules, the Scheduler bridge."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.cluster import demo_cluster
from harness.polling import eventually
from harness.prometheus import REPO

pytestmark = pytest.mark.integration


def status_json(bridge_url: str, *pool: str) -> dict[str, Any]:
    """The CLI's document, or its one line of failure: a read that fails once on a
    loaded box (a slow Prometheus, a refresh) is asked again, not a failed test."""
    run = subprocess.run(
        [sys.executable, "-m", "poolscope.scheduler_bridge.status.cli", "--bridge-url", bridge_url,
         "--timeout", "30", "--json", *pool], cwd=REPO, capture_output=True, text=True,
        timeout=90, check=False)
    if run.returncode != 0:
        return {"failed": run.stderr.strip()}
    doc: dict[str, Any] = json.loads(run.stdout)
    return doc


def drilled_as_expected(doc: dict[str, Any]) -> bool:
    """Every Instance alive with fresh host data, no GPU data, the Proxy's load against
    a capacity, and a trend whose newest slot the rules have written."""
    if "failed" in doc or doc["trend"] is None or doc["trend"]["load_ratio"][-1] is None:
        return False
    instances = doc["instances"]
    return len(instances) == 2 and all(
        (i["liveness"], i["resource"], i["gpus"], i["load_source"]) ==
        ("alive", "fresh", None, "proxy") and i["capacity"] for i in instances)


def test_status_json_shows_both_demo_pools(tmp_path: Path) -> None:
    with demo_cluster(tmp_path, proxies=2, instances=2, rate=3.0) as cluster:
        expected = {pool.proxy_id for pool in cluster.pools}
        # The rules need a few evaluations before every pool's registry is rolled up.
        doc = eventually(lambda: status_json(cluster.scheduler_bridge_url),
                         lambda d: "failed" not in d
                         and {p["proxy_id"] for p in d["pools"]} == expected
                         and all(p["alive"] == 2 and p["stale"] is not None
                                 for p in d["pools"]), 90,
                         "both pools rolled up, every Instance alive, staleness known",
                         every=1)
        # Drilled into, on the real series.
        details = {pid: eventually(
            lambda pid=pid: status_json(cluster.scheduler_bridge_url, pid),
            drilled_as_expected, 90, f"{pid} drilled into", every=1)
            for pid in sorted(expected)}
    for pool in doc["pools"]:
        assert pool["instances_total"] == 2 and pool["stale"] == 0
        assert pool["data_quality"] in ("complete", "partial")
        # No GPU in the demo: unknown, never an empty "no GPU" claim or a 0% bar.
        assert pool["gpus"] is None and pool["gpu_util_ratio"] is None
    for detail in details.values():
        assert detail["trend"]["load_ratio"][0] is None  # before Prometheus started
