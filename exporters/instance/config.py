"""Command line of the Instance exporter.

Every bad value is rejected here, before anything starts, with one line on
stderr and exit code 2 — a typo must not become a silently wrong exporter.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

from exporters.common.argtypes import identifier
from exporters.common.flags import UsageParser, http_url, sample_interval, seconds
from exporters.common.identity import ID_RULE
from exporters.common.web import (
    Listen,
    ServiceConfig,
    UsageError,
    add_common_flags,
    service_config,
)
from exporters.instance.admission import AdmissionThresholds
from exporters.instance.engine import AUTO
from exporters.instance.engines import MAPPINGS
from exporters.instance.service import Settings

DEFAULT_LISTEN = "127.0.0.1:9201"


def build_parser() -> argparse.ArgumentParser:
    p = UsageParser(prog="python -m exporters.instance",
                description="Poolscope Instance exporter: host, GPU and engine load of one "
                            "LLM engine replica, for Prometheus.")
    p.add_argument("--instance-id", required=True, type=identifier,
                   help=f"this Instance's id (label instance_id; {ID_RULE})")
    p.add_argument("--proxy-id", required=True, type=identifier,
                   help=f"the Proxy pool it belongs to (proxy_id; {ID_RULE})")
    p.add_argument("--engine-metrics-url", help="the engine's /metrics URL; without it no "
                                                "engine series are exported")
    p.add_argument("--engine", default=AUTO, choices=[AUTO, *MAPPINGS],
                   help="engine kind; auto detects it from the metric names (default auto)")
    p.add_argument("--sample-interval", type=float, default=1.0,
                   help="seconds between background samples (default 1)")
    p.add_argument("--engine-timeout", type=float, default=2.0,
                   help="seconds to wait for the engine's /metrics (default 2)")
    p.add_argument("--capacity", type=int,
                   help="concurrent requests the Instance can run (else learned)")
    p.add_argument("--draining", action="store_true",
                   help="start in the draining admission state (SIGUSR1 sets, SIGUSR2 clears)")
    d = AdmissionThresholds()
    p.add_argument("--admission-kv-degraded", type=float, default=d.kv_degraded,
                   help=f"KV usage ratio at which the Instance is degraded ({d.kv_degraded})")
    p.add_argument("--admission-kv-saturated", type=float, default=d.kv_saturated,
                   help=f"KV usage ratio at which it is saturated ({d.kv_saturated})")
    p.add_argument("--admission-queue-degraded", type=float, default=d.queue_degraded,
                   help=f"engine waiting requests for degraded ({d.queue_degraded:g})")
    p.add_argument("--admission-queue-saturated", type=float, default=d.queue_saturated,
                   help=f"engine waiting requests for saturated ({d.queue_saturated:g})")
    p.add_argument("--admission-memory-degraded", type=float, default=d.memory_degraded,
                   help=f"host memory available ratio at or below which it is degraded "
                        f"({d.memory_degraded})")
    p.add_argument("--admission-memory-saturated", type=float, default=d.memory_saturated,
                   help=f"host memory available ratio at or below which it is saturated "
                        f"({d.memory_saturated})")
    add_common_flags(p, default_listen=DEFAULT_LISTEN, default_log_level="WARNING")
    return p


@dataclass(frozen=True)
class Config:
    settings: Settings
    service: ServiceConfig

    @property
    def listen(self) -> Listen:
        return self.service.listen


def parse(argv: Sequence[str] | None) -> Config:
    """Parse and validate; raises UsageError with a one-line message."""
    a = build_parser().parse_args(argv)
    if a.capacity is not None and a.capacity <= 0:
        raise UsageError(f"--capacity: must be a positive integer, got {a.capacity}")
    try:
        thresholds = AdmissionThresholds(
            a.admission_kv_degraded, a.admission_kv_saturated,
            a.admission_queue_degraded, a.admission_queue_saturated,
            a.admission_memory_degraded, a.admission_memory_saturated)
    except ValueError as e:
        raise UsageError(f"admission thresholds: {e}") from e
    settings = Settings(
        instance_id=a.instance_id, proxy_id=a.proxy_id,
        sample_interval=sample_interval("--sample-interval", a.sample_interval),
        engine_metrics_url=(http_url("--engine-metrics-url", a.engine_metrics_url)
                            if a.engine_metrics_url else None),
        engine=a.engine,
        engine_timeout=seconds("--engine-timeout", a.engine_timeout),
        capacity=a.capacity, thresholds=thresholds, draining=a.draining)
    return Config(settings, service_config(a))
