"""Command line of the Instance exporter.

Every bad value is rejected here, before anything starts, with one line on
stderr and exit code 2 — a typo must not become a silently wrong exporter.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

from poolscope.exporters.common.sampling import sample_interval
from poolscope.exporters.instance.admission import AdmissionThresholds
from poolscope.exporters.instance.engine import AUTO, engine_url
from poolscope.exporters.instance.engines import MAPPINGS
from poolscope.exporters.instance.service import Settings
from poolscope.service import ports
from poolscope.service.argtypes import (
    Listen,
    ServiceParser,
    UsageError,
    http_url,
    identifier,
    non_negative_float,
    positive_float,
    positive_int,
    ratio,
)
from poolscope.service.identity import ID_RULE
from poolscope.service.web import ServiceConfig, add_common_flags, service_config

PROG = "poolscope-instance-exporter"
DEFAULT_LISTEN = ports.loopback(ports.INSTANCE_EXPORTER)
# Every collector of the exporter and what it does when neither switch is given.
COLLECTORS: dict[str, str] = {
    "host": "on; it cannot be left out, since the pool rules read its health as the "
            "Instance's heartbeat",
    "gpu": "on when NVML is there; without an NVIDIA driver it is unavailable, not failing, "
           "and --collector.gpu makes that a failure",
    "engine": "on when --engine-metrics-url is given, which --collector.engine needs",
}


def build_parser() -> ServiceParser:
    p = ServiceParser(prog=PROG, description="Poolscope Instance exporter: host, GPU and "
                           "engine load of one LLM engine replica, for Prometheus.")
    p.add_argument("--instance-id", required=True, type=identifier,
                   help=f"this Instance's id (label instance_id; {ID_RULE})")
    p.add_argument("--proxy-id", required=True, type=identifier,
                   help=f"the Proxy pool it belongs to (proxy_id; {ID_RULE})")
    p.add_argument("--engine-metrics-url", type=http_url,
                   help="the engine's /metrics URL; without it no engine series are exported "
                        "(llama.cpp in router mode: one model's, /metrics?model=NAME, read "
                        "with autoload=false)")
    p.add_argument("--engine", default=Settings.engine, choices=[AUTO, *MAPPINGS],
                   help="engine kind; auto detects it from the metric names "
                        "(default %(default)s)")
    p.add_argument("--sample-interval", type=sample_interval, default=Settings.sample_interval,
                   help="seconds between background samples (default %(default)g)")
    p.add_argument("--engine-timeout", type=positive_float, default=Settings.engine_timeout,
                   help="seconds to wait for the engine's /metrics (default %(default)g)")
    p.add_argument("--capacity", type=positive_int,
                   help="concurrent requests the Instance can run (else learned)")
    p.add_argument("--draining", action="store_true",
                   help="start in the draining admission state (SIGUSR1 sets, SIGUSR2 clears)")
    d = AdmissionThresholds()
    p.add_argument("--admission-kv-degraded", type=ratio, default=d.kv_degraded,
                   help="KV usage ratio at which the Instance is degraded (%(default)g)")
    p.add_argument("--admission-kv-saturated", type=ratio, default=d.kv_saturated,
                   help="KV usage ratio at which it is saturated (%(default)g)")
    p.add_argument("--admission-queue-degraded", type=non_negative_float,
                   default=d.queue_degraded,
                   help="engine waiting requests for degraded (%(default)g)")
    p.add_argument("--admission-queue-saturated", type=non_negative_float,
                   default=d.queue_saturated,
                   help="engine waiting requests for saturated (%(default)g)")
    p.add_argument("--admission-memory-degraded", type=ratio, default=d.memory_degraded,
                   help="host memory available ratio at or below which it is degraded "
                        "(%(default)g)")
    p.add_argument("--admission-memory-saturated", type=ratio, default=d.memory_saturated,
                   help="host memory available ratio at or below which it is saturated "
                        "(%(default)g)")
    for name, auto in COLLECTORS.items():
        p.add_argument(f"--collector.{name}", dest=f"collector_{name}",
                       action=argparse.BooleanOptionalAction, default=None,
                       help=f"the {name} collector: --collector.{name} forces it on"
                            + ("" if name == "host" else f", --no-collector.{name} leaves it "
                               "out with all its series") + f" (default: {auto})")
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
    a = build_parser().parse(argv)
    try:
        thresholds = AdmissionThresholds(
            a.admission_kv_degraded, a.admission_kv_saturated,
            a.admission_queue_degraded, a.admission_queue_saturated,
            a.admission_memory_degraded, a.admission_memory_saturated)
    except ValueError as e:
        raise UsageError(f"--admission-*: {e}") from e
    if a.collector_host is False:
        raise UsageError("--no-collector.host (or POOLSCOPE_COLLECTOR_HOST=false): the pool "
                         "rules count an Instance as a member "
                         "and fresh by its host collector's health, so without it the "
                         "Instance would leave its pool")
    if a.engine_metrics_url:
        try:
            engine_url(a.engine_metrics_url)
        except ValueError as e:
            raise UsageError(f"--engine-metrics-url: {e}") from e
    if a.collector_engine and not a.engine_metrics_url:
        raise UsageError("--collector.engine needs --engine-metrics-url: the engine's "
                         "/metrics to read")
    settings = Settings(
        instance_id=a.instance_id, proxy_id=a.proxy_id, sample_interval=a.sample_interval,
        engine_metrics_url=a.engine_metrics_url, engine=a.engine,
        engine_timeout=a.engine_timeout, capacity=a.capacity, thresholds=thresholds,
        draining=a.draining, host_collector=a.collector_host,
        gpu_collector=a.collector_gpu, engine_collector=a.collector_engine)
    return Config(settings, service_config(a))
