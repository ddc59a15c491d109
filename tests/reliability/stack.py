"""Small real stacks for the fault tests: demo Proxies, simulated engines, Instance
exporters (as processes, or in this process where a test needs a fake GPU or a
skewed clock), a Scheduler bridge, and helpers to wait for what Prometheus says.

Everything listens on loopback on free ports and is stopped by process group
(deploy/demo/processes.py), so nothing else on the machine is touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from deploy.demo.processes import Child, ProcessGroup, port_or_free, wait_ready
from harness.prometheus import Prometheus
from poolscope.exporters.instance.server import make_app
from poolscope.exporters.instance.service import InstanceExporter
from poolscope.service.listener import HttpLimits, serving

T = TypeVar("T")

# A Proxy that has not heard from an Instance for this long calls it stale. The
# production 10 s: no test here waits for a stale Instance, and a busy machine can
# delay several 1 s beats in a row.
HEARTBEAT_TIMEOUT_S = "10"




def vector(prom: Prometheus, promql: str, by: str = "instance_id") -> dict[str, float]:
    """An instant query's result keyed by one label."""
    return {s["metric"].get(by, ""): float(s["value"][1]) for s in prom.query(promql)}


def scalar(prom: Prometheus, promql: str) -> float | None:
    """The single value of a query, None when the vector is empty."""
    result = prom.query(promql)
    assert len(result) <= 1, result
    return float(result[0]["value"][1]) if result else None


def fetch(url: str, *, token: str | None = None, context: ssl.SSLContext | None = None,
          timeout: float = 10) -> tuple[int, dict[str, str], bytes]:
    """GET `url`: status, headers and body, for error statuses too."""
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def fetch_json(url: str, **kwargs: Any) -> tuple[int, Any]:
    status, _, body = fetch(url, **kwargs)
    return status, json.loads(body)


class ThreadedLoop:
    """An asyncio loop on a daemon thread, so sync tests can host async servers."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


class InProcessExporter:
    """A real InstanceExporter and its HTTP server, on a ThreadedLoop; for fakes
    that only exist in this process (NVML module, wall clock)."""

    def __init__(self, exporter: InstanceExporter, loop: ThreadedLoop) -> None:
        self.exporter = exporter
        self._loop = loop
        self._stack = contextlib.AsyncExitStack()
        self.target = loop.run(self._start())

    async def _start(self) -> str:
        host, port = await self._stack.enter_async_context(
            serving(make_app(self.exporter), "127.0.0.1", 0, limits=HttpLimits()))
        await self.exporter.start()
        self._stack.push_async_callback(self.exporter.stop)
        return f"{host}:{port}"

    def stall_sampling(self) -> None:
        """Stop every collector while the server keeps answering: a hung sampler."""
        self._loop.run(self.exporter.loop.stop())

    def close(self) -> None:
        self._loop.run(self._stack.aclose())


@dataclass
class Pool:
    proxy_id: str
    proxy_url: str
    proxy: Child
    engines: dict[str, str] = field(default_factory=dict)  # instance_id -> engine URL
    exporters: dict[str, Child] = field(default_factory=dict)  # instance_id -> process
    targets: dict[str, str] = field(default_factory=dict)  # instance_id -> host:port


class Launcher:
    """Starts the demo's processes into one ProcessGroup; `stop()` ends them all."""

    def __init__(self, workdir: Path) -> None:
        (workdir / "logs").mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        self.group = ProcessGroup(workdir / "logs")
        self._pending: list[tuple[str, Child]] = []

    def pool(self, proxy_id: str, port: int = 0) -> Pool:
        port = port or port_or_free(0)
        child = self.group.start_python(
            f"proxy-{proxy_id}", "deploy.demo.proxy", "--proxy-id", proxy_id,
            "--listen", f"127.0.0.1:{port}", "--prepare-capacity", "64",
            "--ready-capacity", "64", "--heartbeat-timeout", HEARTBEAT_TIMEOUT_S)
        url = f"http://127.0.0.1:{port}"
        self._pending.append((f"{url}/healthz", child))
        return Pool(proxy_id, url, child)

    def engine(self, pool: Pool, instance_id: str) -> str:
        port = port_or_free(0)
        child = self.group.start_python(
            f"engine-{instance_id}", "deploy.demo.engine_sim",
            "--listen", f"127.0.0.1:{port}", "--model", "demo", "--max-running", "8",
            "--register-url", pool.proxy_url, "--instance-id", instance_id,
            "--capacity", "8", "--heartbeat-interval", "1", "--seed", "1",
            "--log-level", "WARNING")
        url = f"http://127.0.0.1:{port}"
        self._pending.append((f"{url}/health", child))
        pool.engines[instance_id] = url
        return url

    def exporter(self, pool: Pool, instance_id: str, *extra: str) -> str:
        port = port_or_free(0)
        child = self.group.start_python(
            f"exporter-{instance_id}", "poolscope.exporters.instance", "--instance-id", instance_id,
            "--proxy-id", pool.proxy_id, "--listen", f"127.0.0.1:{port}",
            "--engine-metrics-url", f"{pool.engines[instance_id]}/metrics", "--engine", "vllm",
            "--sample-interval", "1", "--engine-timeout", "1", *extra)
        self._pending.append((f"http://127.0.0.1:{port}/healthz", child))
        pool.exporters[instance_id] = child
        pool.targets[instance_id] = f"127.0.0.1:{port}"
        return pool.targets[instance_id]

    def instance(self, pool: Pool, instance_id: str) -> str:
        """An engine registered with the pool's Proxy and an exporter process in front."""
        self.engine(pool, instance_id)
        return self.exporter(pool, instance_id)

    def scheduler_bridge(self, name: str, backends: list[str], *extra: str) -> str:
        port = port_or_free(0)
        urls = [a for b in backends for a in ("--prometheus-url", b)]
        child = self.group.start_python(
            name, "poolscope.scheduler_bridge", *urls, "--listen", f"127.0.0.1:{port}",
            # the rules run every second here (harness/prometheus)
            "--cache-ttl", "0.5", "--evaluation-interval", "1",
            "--query-timeout", "1", "--log-level", "WARNING",
            # a refresh slowed by a loaded box is waited for (a failover takes up to the
            # query timeout per backend); serving a late one stale is tested on its own
            "--answer-within", "10", *extra)
        url = f"http://127.0.0.1:{port}"
        self._pending.append((f"{url}/healthz", child))
        return url

    def loadgen(self, proxy_url: str, rate: float) -> Child:
        return self.group.start_python("loadgen", "deploy.demo.loadgen",
                                       "--target", f"{proxy_url}={rate:g}",
                                       "--duration", "3600", "--seed", "7")

    def wait(self) -> None:
        """Block until everything started since the last wait answers its health check."""
        for url, child in self._pending:
            wait_ready(url, child)
        self._pending.clear()

    def stop(self) -> None:
        self.group.stop()


def restart_process(proc: subprocess.Popen[bytes], log: Path) -> subprocess.Popen[bytes]:
    """The same command line again, in its own session (same port, same data dir)."""
    with log.open("ab") as out:
        return subprocess.Popen(proc.args, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """A throwaway certificate for 127.0.0.1 and localhost, made by openssl now."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True, timeout=60)
    return cert, key
