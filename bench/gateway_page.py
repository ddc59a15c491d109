"""How large a gateway page the adapter reads within its timeouts: the figures of
docs/reliability.md ("Hostile input"), measured against the real adapter process.

    python -m bench.gateway_page [--gateway-timeout S] 1000 10000 20000

For each size, llmgw's page grown to that many endpoints of one pool is served to
`poolscope-proxy-exporter` at its default flags (a read every second, a 2 s
gateway timeout unless given); for a while /healthz is asked every 0.1 s and /metrics every
second, and one Markdown row says how long reads, /healthz and /metrics took.
"""

from __future__ import annotations

import argparse
import re
import sys
import threading
import time
import urllib.request

from harness.commands import command_process
from harness.gateway_pages import fixture_text, many_endpoints
from harness.prometheus import free_port, wait_http
from harness.static_http import serving
from poolscope.service.argtypes import positive_float, positive_int

WATCH_S = 15.0
HEALTHZ_EVERY_S = 0.1
SCRAPE_EVERY_S = 1.0
_DURATION = re.compile(rb'^poolscope_proxy_collector_duration_seconds\{collector="gateway",'
                       rb'proxy_id="chat",source="exporter"\} (\S+)$', re.MULTILINE)
_ERRORS = re.compile(rb'^poolscope_proxy_collector_errors_total\{collector="gateway",'
                     rb'proxy_id="(?:chat|)",reason="(\w+)",source="exporter"\} (\S+)$',
                     re.MULTILINE)


def _timed_get(url: str) -> tuple[float, bytes]:
    start = time.monotonic()
    with urllib.request.urlopen(url, timeout=60) as r:
        body = r.read()
    return time.monotonic() - start, body


def measure(endpoints: int, timeout: list[str]) -> str:
    page = many_endpoints(fixture_text("llmgw"), endpoints).encode()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with serving(page) as gateway_url, command_process(
            "poolscope.exporters.proxy", "--gateway", "llmgw", "--gateway-metrics-url",
            gateway_url, "--pool-label", *timeout, "--listen", f"127.0.0.1:{port}"):
        wait_http(f"{base}/healthz", timeout=120)
        healthz: list[float] = []
        scrapes: list[float] = []
        reads: set[float] = set()
        errors: dict[str, float] = {}
        done = threading.Event()

        def scrape() -> None:
            while not done.wait(SCRAPE_EVERY_S):
                took, body = _timed_get(f"{base}/metrics")
                scrapes.append(took)
                reads.update(float(v) for v in _DURATION.findall(body))
                errors.update((r.decode(), float(v)) for r, v in _ERRORS.findall(body))

        scraper = threading.Thread(target=scrape)
        scraper.start()
        end = time.monotonic() + WATCH_S
        while time.monotonic() < end:
            healthz.append(_timed_get(f"{base}/healthz")[0])
            time.sleep(HEALTHZ_EVERY_S)
        done.set()
        scraper.join()
    failed = ", ".join(f"{r} {v:g}" for r, v in sorted(errors.items()) if v) or "none"
    return (f"| {endpoints:,} | {len(page) / 2**20:.1f} MiB | "
            f"{min(reads, default=0):.2f}-{max(reads, default=0):.2f} s | "
            f"{max(healthz):.2f} s | {max(scrapes, default=0):.2f} s | {failed} |")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gateway-timeout", type=positive_float,
                        help="the adapter's --gateway-timeout (its default when absent)")
    parser.add_argument("endpoints", type=positive_int, nargs="+",
                        help="page sizes, in endpoints of one pool")
    args = parser.parse_args(argv)
    timeout = [] if args.gateway_timeout is None else ["--gateway-timeout",
                                                       f"{args.gateway_timeout:g}"]
    print("| endpoints | page | read | /healthz max | /metrics max | failed reads |")
    print("|---|---|---|---|---|---|")
    for endpoints in args.endpoints:
        print(measure(endpoints, timeout), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
