"""How a Poolscope service starts: the common flags, checked, then the listener run.

The Instance exporter and both bridges share one threat model (more than Prometheus
may reach them), so they share one implementation of it: the listener
(`service.listener`), the middlewares (`service.middleware`) and optional
credentials (`service.auth`) guarding all but /healthz. The flags that configure
these are declared here, so a flag means the same on every service and a bad value
is refused the same way: one line, exit 2.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import signal
import ssl
import sys
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from aiohttp import web
from aiohttp.typedefs import Middleware

from poolscope.service import logs
from poolscope.service.argtypes import (
    Listen,
    UsageError,
    parse_listen,
    positive_float,
    positive_int,
    refuse,
)
from poolscope.service.auth import OPEN_PATHS, Access
from poolscope.service.listener import HttpLimits, serving
from poolscope.service.logs import FORMATS, log_level
from poolscope.service.middleware import guarded

METRICS_PATH = "/metrics"


class ListenError(Exception):
    """The listen address could not be bound; the message is the one line to print."""


# The paths the services answer besides their Prometheus page; the page cannot take one.
SERVED_PATHS = frozenset({"/healthz", "/readyz", "/status"})
SERVED_PREFIXES = ("/v1/", "/debug/", "/status/")


def telemetry_path(value: str) -> str:
    """Where /metrics is served: an absolute path a URL can carry as is, and none a
    service already answers (its routes would then clash at start-up)."""
    segments = value.split("/")[1:]
    if (not re.fullmatch(r"/[A-Za-z0-9._~/-]*", value) or value == "/" or "//" in value
            or any(s in (".", "..") for s in segments)):  # a request path is normalised
        raise argparse.ArgumentTypeError(
            f"expected an absolute path such as /metrics, got {value!r}")
    if value.rstrip("/") in SERVED_PATHS or value.startswith(SERVED_PREFIXES):
        raise argparse.ArgumentTypeError(
            f"{value!r} is served already (/healthz, /readyz, /status, /v1/..., /debug/...)")
    return value


def add_common_flags(p: argparse.ArgumentParser, *, default_listen: str,
                     default_log_level: str, limits: HttpLimits | None = None) -> None:
    """The flags every service takes; `service_config` turns them into a ServiceConfig.

    Named as node_exporter and every exporter-toolkit service names them
    (`--web.listen-address`, `--web.telemetry-path`, `--web.config.file`, `--log.level`,
    `--log.format`), so an operator's habits and a Helm chart's values carry over;
    the names Poolscope used first stay as aliases. `limits` sets the defaults: a
    service many clients poll at once (the Scheduler bridge) needs a higher
    connection cap than one a few Prometheus servers scrape.
    """
    p.add_argument("--web.listen-address", "--listen", dest="listen", type=parse_listen,
                   default=default_listen, metavar="HOST:PORT",
                   help=f"address to serve on (default {default_listen}); a bare PORT "
                        "stays on loopback")
    p.add_argument("--web.telemetry-path", dest="telemetry_path", type=telemetry_path,
                   default=METRICS_PATH, metavar="PATH",
                   help=f"path of the Prometheus page (default {METRICS_PATH})")
    p.add_argument("--web.config.file", dest="web_config_file", type=Path, metavar="FILE",
                   help="exporter-toolkit web config: TLS (tls_server_config), client CAs, "
                        "basic-auth users with bcrypt hashes (basic_auth_users)")
    p.add_argument("--auth-token-file", type=Path, metavar="FILE",
                   help="require 'Authorization: Bearer <token>' (the file's content) on "
                        "every endpoint but /healthz")
    p.add_argument("--tls-cert", type=Path, metavar="PEM",
                   help="serve HTTPS with this certificate (chain); needs --tls-key (or use "
                        "--web.config.file)")
    p.add_argument("--tls-key", type=Path, metavar="PEM", help="the certificate's private key")
    limits = limits or HttpLimits()
    p.add_argument("--max-connections", type=positive_int, default=limits.max_connections,
                   help="open connections at most, TLS handshakes included, and lowered to "
                        "what the descriptor limit leaves room for; past it a new one takes "
                        "the slot of one doing no work, from the address holding the most, "
                        "and gets a 503 only when all are busy with a request "
                        f"(default {limits.max_connections})")
    p.add_argument("--idle-timeout", type=positive_float, default=limits.idle_timeout_s,
                   help="seconds a connection may sit without a complete request before it "
                        f"is closed (default {limits.idle_timeout_s:g}); a TLS handshake has "
                        f"{limits.handshake_timeout_s:g} at most")
    default_level = log_level(default_log_level)
    p.add_argument("--log.level", "--log-level", dest="log_level", type=log_level,
                   default=default_level, metavar="LEVEL",
                   help=f"debug, info, warn or error (default {default_level})")
    p.add_argument("--log.format", dest="log_format", choices=FORMATS, default=FORMATS[0],
                   help="logfmt or json (default %(default)s)")


@dataclass(frozen=True)
class Exposure:
    """What a service's app takes from the common flags: who may read it, where its
    Prometheus page is, and the headers a web config puts on every answer."""

    access: Access | None = None
    telemetry_path: str = METRICS_PATH
    headers: Mapping[str, str] = field(default_factory=dict)

    def middlewares(self) -> list[Middleware]:
        return guarded(self.access, self.headers)


@dataclass(frozen=True)
class ServiceConfig:
    """What the common flags say, checked: files read, TLS loaded, limits valid."""

    listen: Listen
    log_level: str
    limits: HttpLimits
    tls: ssl.SSLContext | None
    exposure: Exposure = field(default_factory=Exposure)
    log_format: str = FORMATS[0]

    def url(self) -> str:
        return self.listen.url("https" if self.tls else "http")


def read_token(path: Path, flag: str = "--auth-token-file") -> str:
    """The bearer token in `path`, surrounding whitespace (a final newline) removed."""
    try:
        token = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{flag}: cannot read {path}: {e}") from e
    if not token or any(c.isspace() for c in token):
        raise UsageError(f"{flag}: {path} must hold one token without spaces")
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


def service_config(args: argparse.Namespace) -> ServiceConfig:
    """Check the common flags of a parser built with `add_common_flags`; raises
    UsageError with a one-line message."""
    limits = HttpLimits(max_connections=args.max_connections, idle_timeout_s=args.idle_timeout)
    web_config = None
    if args.web_config_file:
        # Only then: YAML and bcrypt are 2 MiB of the Instance exporter's memory budget
        # (docs/benchmarks.md), which a host without a web config need not pay.
        from poolscope.service import webconfig

        web_config = webconfig.load(args.web_config_file)
    tls = tls_context(args.tls_cert, args.tls_key)
    if web_config is not None and web_config.tls is not None and tls is not None:
        raise UsageError("--tls-cert/--tls-key and --web.config.file's tls_server_config "
                         "both configure TLS: keep one")
    token = read_token(args.auth_token_file) if args.auth_token_file else None
    access = Access(bearer_token=token,
                    basic_users=web_config.basic_users if web_config else {},
                    open_paths=OPEN_PATHS | (web_config.open_paths if web_config else set()))
    exposure = Exposure(access if access.required else None, args.telemetry_path,
                        web_config.headers if web_config else {})
    return ServiceConfig(args.listen, args.log_level, limits,
                         tls or (web_config.tls if web_config else None), exposure,
                         args.log_format)


# --- running a service ------------------------------------------------------------

async def serve_until_stopped(app: web.Application, config: ServiceConfig, *, prog: str,
                              started: Callable[[], Awaitable[None]] | None = None) -> None:
    """Serve `app` until SIGTERM or SIGINT. `started` runs once the address is bound,
    so a service does no work when it could not listen; raises ListenError then."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with contextlib.AsyncExitStack() as stack:
        try:
            await stack.enter_async_context(serving(
                app, config.listen.host, config.listen.port, tls=config.tls,
                limits=config.limits))
        except OSError as e:
            raise ListenError(f"cannot listen on {config.url()}: {e.strerror or e}") from e
        if started is not None:
            await started()
        print(f"{prog}: serving {config.url()}", file=sys.stderr, flush=True)
        await stop.wait()


class _Configured(Protocol):
    @property
    def service(self) -> ServiceConfig: ...


ConfigT = TypeVar("ConfigT", bound=_Configured)


def command(prog: str, argv: Sequence[str] | None,
            parse: Callable[[Sequence[str] | None], ConfigT],
            serve: Callable[[ConfigT], Coroutine[Any, Any, None]]) -> int:
    """A service's console script: its flags checked (exit 2 with one line), then run."""
    try:
        config = parse(argv)
    except UsageError as e:
        return refuse(prog, e)
    return run(prog, serve(config), config.service)


def run(prog: str, service: Coroutine[Any, Any, None], config: ServiceConfig) -> int:
    """Run a service's main coroutine: 0 after SIGTERM/SIGINT, 1 when its address
    cannot be bound."""
    logs.configure(config.log_level, config.log_format)
    try:
        with contextlib.suppress(KeyboardInterrupt):  # a SIGINT before the handler is set
            asyncio.run(service)
    except ListenError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 1
    return 0
