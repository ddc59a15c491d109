"""The demo cluster as a test fixture: the same launcher `make demo` uses, on
free ports only, with fast scrapes so tests see movement within seconds."""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path

from deploy.demo.cluster import Cluster, parse_args, running_cluster


def demo_cluster(workdir: Path, *, proxies: int = 2, instances: int = 2, rate: float = 3.0,
                 scrape_interval: float = 1.0,
                 simulate_gpus: bool = False,
                 flaky_gpu_period: float = 90.0) -> AbstractContextManager[Cluster]:
    """Start proxies x instances under `rate` req/s (pool k gets rate*(k+1)); without
    GPUs unless asked, as on this machine."""
    args = parse_args([
        "--proxies", str(proxies), "--instances", str(instances), "--rate", f"{rate:g}",
        "--scrape-interval", f"{scrape_interval:g}", "--workdir", str(workdir),
        "--prometheus-port", "0", "--scheduler-bridge-port", "0", "--proxy-bridge-port", "0",
        *(["--simulate-gpus", "--flaky-gpu-period", f"{flaky_gpu_period:g}"]
          if simulate_gpus else [])])
    return running_cluster(args)


__all__ = ["Cluster", "demo_cluster"]
