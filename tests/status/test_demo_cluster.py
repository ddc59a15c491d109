"""`poolscope-status --json` against the real stack: demo cluster, Prometheus with the
project's rules, the Scheduler bridge."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import demo_cluster
from tests.support.polling import eventually
from tests.support.prometheus import REPO

pytestmark = pytest.mark.integration


def status_json(bridge_url: str, *pool: str) -> dict[str, Any]:
    run = subprocess.run(
        [sys.executable, "-m", "poolscope.scheduler_bridge.status.cli", "--bridge-url", bridge_url,
         "--json", *pool], cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0, run.stderr
    doc: dict[str, Any] = json.loads(run.stdout)
    return doc


def test_status_json_shows_both_demo_pools(tmp_path: Path) -> None:
    with demo_cluster(tmp_path, proxies=2, instances=2, rate=3.0) as cluster:
        expected = {pool.proxy_id for pool in cluster.pools}
        # The rules need a few evaluations before every pool's registry is rolled up.
        doc = eventually(lambda: status_json(cluster.scheduler_bridge_url),
                         lambda d: {p["proxy_id"] for p in d["pools"]} == expected
                         and all(p["alive"] == 2 for p in d["pools"]), 90,
                         "both pools rolled up, every Instance alive", every=1)
        # Drilled into, on the real series, once the rules have written a trend point.
        details = {pid: eventually(
            lambda pid=pid: status_json(cluster.scheduler_bridge_url, pid),
            lambda d: d["trend"] is not None and d["trend"]["load_ratio"][-1] is not None,
            90, f"{pid}'s trend has its newest slot", every=1) for pid in sorted(expected)}
    for pool in doc["pools"]:
        assert pool["instances_total"] == 2 and pool["stale"] == 0
        assert pool["data_quality"] in ("complete", "partial")
        # No GPU in the demo: unknown, never an empty "no GPU" claim or a 0% bar.
        assert pool["gpus"] is None and pool["gpu_util_ratio"] is None
    for detail in details.values():
        instances = detail["instances"]
        assert len(instances) == 2, instances
        assert all((i["liveness"], i["resource"], i["gpus"]) == ("alive", "fresh", None)
                   for i in instances), instances
        assert all(i["load_source"] == "proxy" and i["capacity"] for i in instances)
        assert detail["trend"]["load_ratio"][0] is None  # before Prometheus started
