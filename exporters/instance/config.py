"""Command line of the Instance exporter.

Every bad value is rejected here, before anything starts, with one line on
stderr and exit code 2 — a typo must not become a silently wrong exporter.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import ssl
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from exporters.instance.admission import AdmissionThresholds
from exporters.instance.engine import AUTO
from exporters.instance.engines import MAPPINGS
from exporters.instance.server import HttpLimits
from exporters.instance.service import Settings

DEFAULT_LISTEN = "127.0.0.1:9201"


class UsageError(Exception):
    """A command-line value is invalid; the message is the one line to print."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


@dataclass(frozen=True)
class Listen:
    host: str
    port: int

    def url(self, scheme: str = "http") -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}"


def parse_listen(value: str) -> Listen:
    host, sep, port_text = value.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise UsageError(f"--listen: expected HOST:PORT, got {value!r}")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise UsageError(f"--listen: port {port} out of range 1..65535")
    host = host.removeprefix("[").removesuffix("]")
    if ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError as e:
            raise UsageError(f"--listen: bad IPv6 address {host!r}") from e
    return Listen(host, port)


def _positive(flag: str, value: float) -> float:
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"{flag}: must be a positive number of seconds, got {value}")
    return value


def _url(value: str) -> str:
    parsed = urllib.parse.urlsplit(value)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise UsageError(f"--engine-metrics-url: expected an http(s) URL, got {value!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m exporters.instance",
                description="Poolscope Instance exporter: host, GPU and engine load of one "
                            "LLM engine replica, for Prometheus.")
    p.add_argument("--instance-id", required=True, help="this Instance's id (label instance_id)")
    p.add_argument("--proxy-id", required=True, help="the Proxy pool it belongs to (proxy_id)")
    p.add_argument("--listen", default=DEFAULT_LISTEN,
                   help=f"HOST:PORT to serve on (default {DEFAULT_LISTEN}, loopback)")
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
    p.add_argument("--auth-token-file", type=Path, metavar="FILE",
                   help="require 'Authorization: Bearer <token>' (the file's content) on "
                        "every endpoint but /healthz")
    p.add_argument("--tls-cert", type=Path, metavar="PEM",
                   help="serve HTTPS with this certificate (chain); needs --tls-key")
    p.add_argument("--tls-key", type=Path, metavar="PEM", help="the certificate's private key")
    limits = HttpLimits()
    p.add_argument("--max-connections", type=int, default=limits.max_connections,
                   help="open connections at most; more get a 503 and are closed "
                        f"(default {limits.max_connections})")
    p.add_argument("--idle-timeout", type=float, default=limits.idle_timeout_s,
                   help="seconds a connection may sit without a complete request before it "
                        f"is closed (default {limits.idle_timeout_s:g})")
    p.add_argument("--log-level", default="WARNING",
                   choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="(default WARNING)")
    return p


@dataclass(frozen=True)
class Config:
    settings: Settings
    listen: Listen
    log_level: str
    limits: HttpLimits = field(default_factory=HttpLimits)
    auth_token: str | None = None
    tls: ssl.SSLContext | None = None

    def url(self) -> str:
        return self.listen.url("https" if self.tls else "http")


def read_token(path: Path) -> str:
    """The bearer token in `path`, surrounding whitespace (a final newline) removed."""
    try:
        token = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--auth-token-file: cannot read {path}: {e}") from e
    if not token or any(c.isspace() for c in token):
        raise UsageError(f"--auth-token-file: {path} must hold one token without spaces")
    return token


def tls_context(cert: Path | None, key: Path | None) -> ssl.SSLContext | None:
    """A server-side TLS context, loaded now so a bad file fails at startup."""
    if (cert is None) != (key is None):
        raise UsageError("--tls-cert and --tls-key go together")
    if cert is None or key is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as e:
        raise UsageError(f"--tls-cert/--tls-key: cannot load {cert}, {key}: {e}") from e
    return context


def parse(argv: Sequence[str] | None) -> Config:
    """Parse and validate; raises UsageError with a one-line message."""
    a = build_parser().parse_args(argv)
    if not a.instance_id.strip() or not a.proxy_id.strip():
        raise UsageError("--instance-id and --proxy-id must not be empty")
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
        sample_interval=_positive("--sample-interval", a.sample_interval),
        engine_metrics_url=_url(a.engine_metrics_url) if a.engine_metrics_url else None,
        engine=a.engine,
        engine_timeout=_positive("--engine-timeout", a.engine_timeout),
        capacity=a.capacity, thresholds=thresholds, draining=a.draining)
    try:
        limits = HttpLimits(max_connections=a.max_connections, idle_timeout_s=a.idle_timeout)
    except ValueError as e:
        raise UsageError(f"--max-connections/--idle-timeout: {e}") from e
    return Config(settings, parse_listen(a.listen), a.log_level, limits,
                  read_token(a.auth_token_file) if a.auth_token_file else None,
                  tls_context(a.tls_cert, a.tls_key))
