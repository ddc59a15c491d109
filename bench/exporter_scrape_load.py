"""The Instance exporter's CPU and memory at 1x and at 10x the scrape rate.

    python -m bench.exporter_scrape_load [--duration 30] [--scrapers 10] [--interval 1]

Four exporter processes run side by side over the same window, each sampling every
second from an engine endpoint serving the vLLM fixture: one nobody scrapes (what
sampling alone costs), one scraped once per interval (1x, the issue-2 baseline), one
scraped by `--scrapers` concurrent scrapers each once per interval, staggered as
independent Prometheus servers would be (10x: an HA pair and more), and one scraped
as often on /healthz, a response that renders almost nothing: the HTTP floor, so
that a scrape's cost splits into serving a request and rendering the exposition.
Scrapers send the Accept and Accept-Encoding (gzip) headers Prometheus 2.42 sends,
and each holds its own kept-alive connection. CPU is user+system time over the
window as a percentage of one core; RSS is sampled every second.

Target: within 1% of a core at 1x and at 10x; the cost
of one scrape is reported too (CPU above the unscraped exporter's, per scrape).
Loopback only; every scraper does a fixed number of scrapes, so the run ends by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

import aiohttp
import psutil

from bench.teardown import unwind_on_sigterm
from harness.prometheus import free_port, stop_group, wait_http
from harness.static_http import serving_fixture

WARM_UP_S = 3.0  # first samples, imports and connections before the window opens
CPU_BUDGET_PERCENT = 1.0
REQUEST_TIMEOUT_S = 10.0
# What Prometheus 2.42 sends with every scrape (captured from /usr/bin/prometheus).
PROMETHEUS_HEADERS = {
    "Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
              "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding": "gzip"}

# Why a scrape body is not acceptable, or None when it is.
BodyCheck = Callable[[bytes], str | None]


def non_empty(body: bytes) -> str | None:
    """The benchmark's check: cheap, so the scrapers' own work stays small (the
    load test parses every exposition)."""
    return None if body else "empty answer"


@dataclass
class Scrapes:
    ok: int = 0
    errors: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True)
class Exporter:
    base_url: str
    process: psutil.Process


@contextmanager
def exporter_process(engine_url: str, name: str) -> Iterator[Exporter]:
    """`python -m poolscope.exporters.instance` on a free loopback port, as deployed."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "poolscope.exporters.instance", "--instance-id", name, "--proxy-id",
         "bench", "--listen", f"127.0.0.1:{port}", "--engine-metrics-url", engine_url,
         "--sample-interval", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz")
        yield Exporter(f"http://127.0.0.1:{port}", psutil.Process(proc.pid))
    finally:
        stop_group(proc)


async def scrape_at_rate(url: str, scrapers: int, interval_s: float, duration_s: float,
                         check: BodyCheck = non_empty) -> Scrapes:
    """`scrapers` independent scrapers, each once per `interval_s` for `duration_s`,
    scraper k offset by k/scrapers of an interval (Prometheus spreads its targets);
    `check` sees the body as aiohttp decoded it."""
    result = Scrapes()
    ticks = max(1, math.floor(duration_s / interval_s))
    start = time.monotonic()
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)

    async def scraper(k: int) -> None:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1),
                                         timeout=timeout) as session:
            for i in range(ticks):
                due = start + (i + k / scrapers) * interval_s
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                try:
                    async with session.get(url, headers=PROMETHEUS_HEADERS) as resp:
                        body = await resp.read()
                        error = (f"HTTP {resp.status}" if resp.status != 200
                                 else check(body))
                except (aiohttp.ClientError, TimeoutError) as e:
                    error = type(e).__name__
                if error is None:
                    result.ok += 1
                else:
                    result.errors[error] += 1

    await asyncio.gather(*(scraper(k) for k in range(scrapers)))
    return result


@dataclass(frozen=True)
class Plan:
    label: str
    scrapers: int
    path: str = "/metrics"


@dataclass(frozen=True)
class Row:
    plan: Plan
    scrapes: Scrapes
    user_s: float
    system_s: float
    wall_s: float
    rss_max_mib: float
    rss_last_mib: float

    @property
    def cpu_percent(self) -> float:
        return (self.user_s + self.system_s) / self.wall_s * 100


async def _sample_rss(procs: Sequence[psutil.Process], until: float) -> list[list[float]]:
    samples: list[list[float]] = [[] for _ in procs]
    while time.monotonic() < until:
        for series, p in zip(samples, procs, strict=True):
            series.append(p.memory_info().rss / 2**20)
        await asyncio.sleep(1.0)
    return samples


async def measure(plans: Sequence[Plan], exporters: Sequence[Exporter], interval_s: float,
                  duration_s: float) -> list[Row]:
    """Every exporter over the same window, after a warm-up."""
    procs = [e.process for e in exporters]
    await asyncio.sleep(WARM_UP_S)
    cpu0 = [p.cpu_times() for p in procs]
    wall0 = time.monotonic()
    rss_task = asyncio.create_task(_sample_rss(procs, wall0 + duration_s))
    scrapes = await asyncio.gather(*(
        scrape_at_rate(e.base_url + plan.path, plan.scrapers, interval_s, duration_s)
        for plan, e in zip(plans, exporters, strict=True)))
    rss = await rss_task
    wall = time.monotonic() - wall0
    cpu1 = [p.cpu_times() for p in procs]
    return [Row(plan, s, t1.user - t0.user, t1.system - t0.system, wall, max(r), r[-1])
            for plan, s, t0, t1, r in zip(plans, scrapes, cpu0, cpu1, rss, strict=True)]


def plans(scrapers: int) -> list[Plan]:
    """The unscraped exporter is the baseline every other row's scrape cost is taken
    above; the /healthz row is the HTTP floor: a scrape that renders almost nothing."""
    return [Plan("not scraped (sampling only)", 0), Plan("1x", 1),
            Plan(f"{scrapers}x", scrapers),
            Plan(f"{scrapers}x on /healthz (HTTP floor)", scrapers, "/healthz")]


async def _run(scrapers: int, interval_s: float, duration_s: float) -> list[Row]:
    plan = plans(scrapers)
    with serving_fixture("vllm") as engine_url, ExitStack() as stack:
        exporters = [stack.enter_context(exporter_process(engine_url, f"bench-{i}"))
                     for i in range(len(plan))]
        return await measure(plan, exporters, interval_s, duration_s)


def table(rows: Sequence[Row], interval_s: float, duration_s: float) -> str:
    idle = rows[0]
    out = [f"| exporter | scrapes/s | scrapes ok / errors | CPU % of one core over "
           f"{duration_s:g} s | CPU ms per scrape above unscraped: all (user + system) "
           "| RSS max / last (MiB) |",
           "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        # The unscraped exporter's CPU rate is what sampling costs; the rest is scraping.
        user = (r.user_s - idle.user_s / idle.wall_s * r.wall_s) * 1e3
        system = (r.system_s - idle.system_s / idle.wall_s * r.wall_s) * 1e3
        per_scrape = (f"{(user + system) / r.scrapes.ok:.2f} ({user / r.scrapes.ok:.2f} + "
                      f"{system / r.scrapes.ok:.2f})" if r.scrapes.ok else "-")
        errors = sum(r.scrapes.errors.values())
        out.append(f"| {r.plan.label} | {r.plan.scrapers / interval_s:g} "
                   f"| {r.scrapes.ok} / {errors} | {r.cpu_percent:.2f} | {per_scrape} "
                   f"| {r.rss_max_mib:.1f} / {r.rss_last_mib:.1f} |")
    return "\n".join(out)


def verdicts(rows: Sequence[Row]) -> list[str]:
    failed = [f"{r.plan.label}: scrape errors {dict(r.scrapes.errors)}"
              for r in rows if r.scrapes.errors]
    for r in rows[1:3]:  # plans(): 1x and the loaded exporter
        if r.cpu_percent > CPU_BUDGET_PERCENT:
            failed.append(f"{r.plan.label}: CPU {r.cpu_percent:.2f}% > "
                          f"{CPU_BUDGET_PERCENT:g}% of a core")
    return failed


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.exporter_scrape_load",
                                description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--duration", type=float, default=30.0,
                   help="seconds of measurement (at least 30)")
    p.add_argument("--scrapers", type=int, default=10,
                   help="concurrent scrapers of the loaded exporter (default 10: 10x)")
    p.add_argument("--interval", type=float, default=1.0,
                   help="seconds between one scraper's scrapes (default 1)")
    a = p.parse_args(argv)
    if a.duration < 30 or a.scrapers < 2 or a.interval <= 0:
        p.error("need --duration >= 30, --scrapers >= 2 and a positive --interval")
    rows = asyncio.run(_run(a.scrapers, a.interval, a.duration))
    print(table(rows, a.interval, a.duration))
    failed = verdicts(rows)
    print(f"\n1x and {a.scrapers}x CPU within {CPU_BUDGET_PERCENT:g}% of a core; "
          "no scrape errors"
          if not failed else "\nMISSED: " + "; ".join(failed))
    return 0 if not failed else 1


if __name__ == "__main__":
    unwind_on_sigterm()
    sys.exit(main())
