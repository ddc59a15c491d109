"""deploy/prometheus/prometheus.yml as the deploy tests read it.

Paths in it are relative to the file, as Prometheus resolves them; the
helpers here resolve them the same way so that a test never depends on the
directory pytest runs from.
"""

from __future__ import annotations

import glob
import re
from pathlib import Path
from typing import Any

import yaml

from harness.prometheus import REPO

CONFIG = REPO / "deploy" / "prometheus" / "prometheus.yml"
# The jobs that scrape exporters, and the identity labels their targets carry.
EXPORTER_JOBS = {"poolscope-instance": ("proxy_id", "instance_id"),
                 "poolscope-proxy": ("proxy_id",)}


def load() -> dict[str, Any]:
    return yaml.safe_load(CONFIG.read_text())


def job(config: dict[str, Any], name: str) -> dict[str, Any]:
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    return jobs[name]


def resolve(pattern: str) -> list[Path]:
    """A path glob from the config, resolved against the config's directory."""
    return sorted(Path(p).resolve() for p in glob.glob(str(CONFIG.parent / pattern)))


def sd_files(scrape_job: dict[str, Any]) -> list[Path]:
    return [path for sd in scrape_job.get("file_sd_configs", [])
            for pattern in sd["files"] for path in resolve(pattern)]


def seconds(duration: str) -> float:
    m = re.fullmatch(r"(\d+)(ms|s|m)", duration)
    if not m:
        raise ValueError(f"duration {duration!r} is not modelled here")
    return int(m.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0}[m.group(2)]
