"""Instance exporter vs Debian's prometheus-node-exporter, side by side in one run.

    python -m bench.instance_exporter [--scrapes 300] [--duration 30]

Both run on loopback; the Instance exporter samples every second and reads an
engine endpoint serving the vLLM fixture (tests/fixtures/engines/vllm.txt).
Phase 1 scrapes each exporter `--scrapes` times, interleaved, over a keep-alive
connection like Prometheus does, and times each full response. Phase 2 then
scrapes each once a second for `--duration` seconds while sampling both
processes' RSS and CPU time every second. Prints a markdown table.

Targets: median scrape latency no worse than node_exporter's, RSS at
most 2x node_exporter's, CPU at most 1% of one core.
"""

from __future__ import annotations

import argparse
import http.client
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import psutil

from bench.teardown import unwind_on_sigterm
from harness.prometheus import free_port, stop_group, wait_http
from harness.static_http import serving_fixture


@dataclass
class Target:
    name: str
    port: int
    process: subprocess.Popen[bytes]
    latencies_ms: list[float] = field(default_factory=list)
    rss_mb: list[float] = field(default_factory=list)
    cpu_percent: float = 0.0
    conn: http.client.HTTPConnection | None = None

    def scrape(self) -> float:
        """One full /metrics response over a kept-alive connection, in ms."""
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        start = time.perf_counter()
        self.conn.request("GET", "/metrics")
        resp = self.conn.getresponse()
        body = resp.read()
        elapsed = (time.perf_counter() - start) * 1000
        if resp.status != 200 or not body:
            raise RuntimeError(f"{self.name}: HTTP {resp.status}")
        return elapsed


def start(cmd: Sequence[str], name: str, port: int, health_path: str) -> Target:
    proc = subprocess.Popen(list(cmd), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    wait_http(f"http://127.0.0.1:{port}{health_path}")
    return Target(name, port, proc)


def measure(targets: list[Target], scrapes: int, duration: float) -> None:
    for _ in range(20):  # warm-up: connections, caches, first samples
        for t in targets:
            t.scrape()
    for _ in range(scrapes):
        for t in targets:
            t.latencies_ms.append(t.scrape())
    procs = {t.name: psutil.Process(t.process.pid) for t in targets}
    cpu0 = {n: sum(p.cpu_times()[:2]) for n, p in procs.items()}
    wall0 = time.monotonic()
    next_at = wall0
    while time.monotonic() - wall0 < duration:
        for t in targets:
            t.scrape()
            t.rss_mb.append(procs[t.name].memory_info().rss / 2**20)
        next_at += 1.0
        time.sleep(max(0.0, next_at - time.monotonic()))
    wall = time.monotonic() - wall0
    for t in targets:
        t.cpu_percent = (sum(procs[t.name].cpu_times()[:2]) - cpu0[t.name]) / wall * 100


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98]


def table(ours: Target, ref: Target, duration: float) -> str:
    rows = [
        ("median scrape latency (ms)", statistics.median(ours.latencies_ms),
         statistics.median(ref.latencies_ms), "<= 1.0x"),
        ("p99 scrape latency (ms)", p99(ours.latencies_ms), p99(ref.latencies_ms), "-"),
        ("RSS, max (MiB)", max(ours.rss_mb), max(ref.rss_mb), "<= 2.0x"),
        (f"CPU, % of one core over {duration:g} s", ours.cpu_percent, ref.cpu_percent,
         "ours <= 1%"),
    ]
    out = ["| measure | poolscope instance exporter | node_exporter | ratio | target |",
           "|---|---:|---:|---:|---|"]
    for name, a, b, target in rows:
        ratio = f"{a / b:.2f}x" if b > 0 else "n/a"
        out.append(f"| {name} | {a:.2f} | {b:.2f} | {ratio} | {target} |")
    return "\n".join(out)


def verdicts(ours: Target, ref: Target) -> list[str]:
    failed = []
    if statistics.median(ours.latencies_ms) > statistics.median(ref.latencies_ms):
        failed.append("median scrape latency above node_exporter's")
    if max(ours.rss_mb) > 2 * max(ref.rss_mb):
        failed.append("RSS above 2x node_exporter's")
    if ours.cpu_percent > 1.0:
        failed.append("CPU above 1% of a core")
    return failed


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.instance_exporter",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--scrapes", type=int, default=300, help="timed scrapes per exporter")
    ap.add_argument("--duration", type=float, default=30.0,
                    help="seconds of 1 s resource sampling (at least 30)")
    ap.add_argument("--node-exporter", default=shutil.which("prometheus-node-exporter"),
                    help="node_exporter binary (default: Debian's, from PATH)")
    a = ap.parse_args(argv)
    if a.duration < 30 or a.scrapes < 100:
        ap.error("need --duration >= 30 and --scrapes >= 100 for meaningful figures")
    if not a.node_exporter:
        ap.error("prometheus-node-exporter not found (apt-get install prometheus-node-exporter)")
    targets: list[Target] = []
    with serving_fixture("vllm") as engine_url:
        try:
            port = free_port()
            targets.append(start(
                [sys.executable, "-m", "poolscope.exporters.instance", "--instance-id", "bench-0",
                 "--proxy-id", "bench", "--listen", f"127.0.0.1:{port}",
                 "--engine-metrics-url", engine_url, "--sample-interval", "1"],
                "poolscope", port, "/healthz"))
            port = free_port()
            targets.append(start([a.node_exporter, f"--web.listen-address=127.0.0.1:{port}"],
                                 "node_exporter", port, "/metrics"))
            measure(targets, a.scrapes, a.duration)
        finally:
            for t in targets:
                if t.conn is not None:
                    t.conn.close()
                stop_group(t.process)
    ours, ref = targets
    print(table(ours, ref, a.duration))
    failed = verdicts(ours, ref)
    print("\nall targets met" if not failed else "\nMISSED: " + "; ".join(failed))
    return 0 if not failed else 1


if __name__ == "__main__":
    unwind_on_sigterm()
    sys.exit(main())
