"""Series per member: what one more Instance costs on its Proxy's /metrics, on its own
Instance exporter's /metrics and in Prometheus' head, measured on real processes.

    python -m bench.series_per_member [--sizes 2,6] [--gpus 2] [--interval 2] \\
        [--timeout 180] [--by-family] [--workdir DIR]

For each fleet size, a fresh stack of one pool: the demo Proxy (the Proxy library
embedded, round robin), that many simulated engines registered with it, the real Instance
exporter in front of each (over simulated GPUs of one model read through its real NVML
collector; --gpus 0: none, so the GPU collector reports itself unavailable), and a real
Prometheus running rules/ over them with the demo's config, whose exporter jobs filter
series as the deployed ones do. The stacks run side by side, each with its own
Prometheus, so each head holds its own fleet from its first scrape.

Every member gets requests, so its dispatch series exist and its exporter learns its
capacity; once every page shows what a healthy, used member publishes (the exporters'
window rates take RATE_WINDOW_S), every target is scraped twice more and every rule
group evaluated after that. Series counts are deterministic: a busy machine makes the
run slower, never the figures different. Exit 1, with a line saying what could not be
measured; 2 for a bad flag.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from prometheus_client.openmetrics.parser import text_string_to_metric_families

from bench.fleet_members import start_instance_exporter, start_proxy, start_sim_engine
from bench.scheduling.argtypes import positive_ints
from bench.teardown import unwind_on_sigterm
from deploy.demo.cluster import Pool, instance_id_of, prometheus_binary, prometheus_config
from deploy.demo.processes import ProcessGroup, port_or_free, wait_ready
from poolscope.contract import catalog
from poolscope.exporters.common.promtext import select
from poolscope.service.argtypes import non_negative_int, positive_float

PROXY_ID = "pool-a"
SLOTS = 4  # each simulated engine's batch, registered as its capacity
GPU_MODEL = "NVIDIA H100 80GB HBM3"
TOKENS_PER_SECOND = 50.0
# A request's output: 3 s at the engine's speed, so the exporter (sampling every 0.5 s)
# sees it running and learns the Instance's capacity from it.
REQUEST_TOKENS = 150
REQUESTS_PER_MEMBER = 2
READ_TIMEOUT_S = 10.0
# What Prometheus adds to every target itself, whatever its page holds.
SYNTHETIC = ("up", "scrape_duration_seconds", "scrape_samples_scraped",
             "scrape_samples_post_metric_relabeling", "scrape_series_added")
INSTANCE_JOB, PROXY_JOB = "poolscope-instance", "poolscope-proxy"
RECORDS, ALERTS = "rule records", "ALERTS"
# Families a healthy Instance's exporter publishes only once it has evidence: a
# window's worth of samples (RATE_WINDOW_S), a running request for the capacity.
LATE_INSTANCE_FAMILIES = (catalog.HOST_NETWORK_RECEIVE_RATE, catalog.HOST_NETWORK_TRANSMIT_RATE,
                          catalog.ENGINE_REQUEST_SUCCESS_RATE, catalog.INSTANCE_CAPACITY)
# The Proxy's per-member families that exist only after a dispatch to the member.
DISPATCHED_FAMILIES = (catalog.PROXY_INSTANCE_LAST_DISPATCH, catalog.PROXY_INSTANCE_IDLE)
OPENMETRICS = "application/openmetrics-text; version=1.0.0"
HEAD_SERIES = "prometheus_tsdb_head_series"

T = TypeVar("T")


class Unmeasurable(RuntimeError):
    """Something the figures need did not happen within the timeout."""


@dataclass(frozen=True)
class Settings:
    sizes: tuple[int, ...] = (2, 6)
    gpus: int = 2
    interval_s: float = 2.0
    timeout_s: float = 180.0


@dataclass(frozen=True)
class Stack:
    size: int
    proxy_url: str
    exporter_urls: tuple[str, ...]
    prometheus_url: str
    started: float  # epoch seconds, before its first process


@dataclass(frozen=True)
class Measured:
    """One fleet size's figures, once every page is steady and scraped."""

    size: int
    proxy_page: int  # series on the Proxy's /metrics
    proxy_page_members: int  # of them, about one member (labelled with an instance_id)
    exporter_page: int  # series on one Instance exporter's /metrics
    exporter_kept: int  # of them, what the instance job keeps (its poolscope_* filter)
    exporter_families: dict[str, int]  # that page's series by family (sample name)
    proxy_member_families: dict[str, int]  # the Proxy's per-member series by sample name
    head: int  # prometheus_tsdb_head_series
    stored: dict[str, int]  # series Prometheus holds now: by job, rule records, ALERTS
    ended: tuple[str, ...]  # series in the head with no current sample (stale, ended)

    @property
    def unaccounted(self) -> int:
        """Head series neither stored now nor ended since the start: 0 when all is known."""
        return self.head - sum(self.stored.values()) - len(self.ended)


@dataclass(frozen=True)
class Result:
    sizes: tuple[Measured, ...]

    def per_member(self, figure: Callable[[Measured], int]) -> Fraction:
        """What one more Instance adds to `figure`, between the smallest and largest fleet."""
        small, large = self.sizes[0], self.sizes[-1]
        return Fraction(figure(large) - figure(small), large.size - small.size)

    @property
    def groups(self) -> list[str]:
        seen = {g for m in self.sizes for g in m.stored}
        order = [INSTANCE_JOB, PROXY_JOB, RECORDS, ALERTS]
        return [g for g in order if g in seen] + sorted(seen - set(order))


# --- reading ---------------------------------------------------------------------------

def _get(url: str, accept: str | None = None) -> bytes:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=READ_TIMEOUT_S) as answer:
        body: bytes = answer.read()
    return body


def page_samples(url: str) -> list[tuple[str, dict[str, str]]]:
    """(name, labels) of every sample on `url`'s /metrics, negotiated as Prometheus
    negotiates it (OpenMetrics): each is one series a scrape stores."""
    text = _get(f"{url}/metrics", OPENMETRICS).decode()
    return [(s.name, dict(s.labels)) for family in text_string_to_metric_families(text)
            for s in family.samples]


def api(prometheus_url: str, path: str, **params: str) -> Any:
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    body = json.loads(_get(f"{prometheus_url}/api/v1/{path}{query}"))
    if body.get("status") != "success":
        raise Unmeasurable(f"{prometheus_url} /api/v1/{path}: {body}")
    return body["data"]


def head_series(prometheus_url: str) -> int:
    """prometheus_tsdb_head_series on Prometheus' own /metrics."""
    found = select(_get(f"{prometheus_url}/metrics").decode(), [HEAD_SERIES])[HEAD_SERIES]
    if len(found) != 1:
        raise Unmeasurable(f"{prometheus_url}/metrics has no single {HEAD_SERIES}: {found}")
    return int(found[0][1])


def ended_series(prometheus_url: str, since: float) -> tuple[str, ...]:
    """Series with a sample since `since` (the stack's start) and none now: what ended
    or went stale while the fleet settled (an alert's pending state, say). They stay in
    the head until it is compacted, hours later, then leave it."""
    every = '{__name__=~".+"}'

    def key(labels: dict[str, str]) -> str:
        name = labels.pop("__name__", "")
        return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"

    seen = {key(m) for m in api(prometheus_url, "series", **{
        "match[]": every, "start": f"{since:.3f}", "end": f"{time.time():.3f}"})}
    now = {key(r["metric"]) for r in api(prometheus_url, "query", query=every)["result"]}
    return tuple(sorted(seen - now))


def stored_series(prometheus_url: str) -> dict[str, int]:
    """Series Prometheus holds a current sample of, by group: each scrape job's, the rule
    records (a name with a colon), the alerts' (ALERTS, ALERTS_FOR_STATE). A series with
    no current sample (ended, marked stale) is in none of them."""
    groups: Counter[str] = Counter()
    every = 'count by (job, __name__) ({__name__=~".+"})'
    for row in api(prometheus_url, "query", query=every)["result"]:
        name, job = row["metric"]["__name__"], row["metric"].get("job", "")
        group = (RECORDS if ":" in name else ALERTS if name.startswith("ALERTS")
                 else job or "(no job)")
        groups[group] += int(row["value"][1])
    return dict(groups)


# --- waiting ---------------------------------------------------------------------------

def until(probe: Callable[[], T], ok: Callable[[T], bool], what: str, timeout_s: float,
          every_s: float = 0.5) -> T:
    """Poll `probe` until `ok` holds; Unmeasurable, naming `what` and the last value
    seen, after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        last: object
        try:
            value = probe()
        except OSError as e:  # a page that did not answer this time
            last = e
        else:
            if ok(value):
                return value
            last = value
        if time.monotonic() > deadline:
            raise Unmeasurable(f"{what}: not within {timeout_s:g} s; last seen: {last!r}")
        time.sleep(every_s)


def _members_with(url: str, families: Sequence[catalog.Family]) -> dict[str, set[str]]:
    """Per family name, the instance_ids the Proxy page at `url` has a series of."""
    found: dict[str, set[str]] = {f.name: set() for f in families}
    for name, labels in page_samples(url):
        if name in found and "instance_id" in labels:
            found[name].add(labels["instance_id"])
    return found


def _missing_late(url: str) -> list[str]:
    names = {name for name, _ in page_samples(url)}
    return [f.name for f in LATE_INSTANCE_FAMILIES if f.name not in names]


def wait_alive(stack: Stack, timeout_s: float) -> None:
    until(lambda: _members_with(stack.proxy_url, (catalog.PROXY_INSTANCE_ALIVE,)),
          lambda found: len(found[catalog.PROXY_INSTANCE_ALIVE.name]) == stack.size,
          f"{stack.size} members registered with the Proxy", timeout_s)


def send_requests(stack: Stack) -> None:
    """REQUESTS_PER_MEMBER requests per member at once: round robin gives each member
    its share, each request long enough for the member's exporter to see it running."""
    body = json.dumps({"model": "bench", "max_tokens": REQUEST_TOKENS,
                       "messages": [{"role": "user", "content": "count the series"}]}).encode()

    def one(_: int) -> int:
        request = urllib.request.Request(f"{stack.proxy_url}/v1/chat/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as answer:
            answer.read()
            return int(answer.status)

    count = REQUESTS_PER_MEMBER * stack.size
    with ThreadPoolExecutor(count) as pool:
        statuses = list(pool.map(one, range(count)))
    if any(s != 200 for s in statuses):
        raise Unmeasurable(f"the Proxy answered {statuses} to {count} requests")


def wait_steady(stack: Stack, timeout_s: float) -> None:
    """Until the Proxy has dispatched to every member and every exporter publishes what a
    healthy, used Instance publishes."""
    until(lambda: _members_with(stack.proxy_url, DISPATCHED_FAMILIES),
          lambda found: all(len(ids) == stack.size for ids in found.values()),
          f"the Proxy's dispatch series of all {stack.size} members", timeout_s)
    for url in stack.exporter_urls:
        until(partial(_missing_late, url), lambda missing: not missing,
              f"every late family on {url}/metrics", timeout_s)


def wait_scraped_and_evaluated(stack: Stack, since: float, interval_s: float,
                               timeout_s: float) -> None:
    """Until every target of the stack's Prometheus is up and scraped twice after `since`
    (the last scrape started an interval or more after it), and every rule group was
    evaluated after the last of those scrapes."""
    def targets() -> list[dict[str, Any]]:
        return list(api(stack.prometheus_url, "targets", state="active")["activeTargets"])

    def scraped(active: list[dict[str, Any]]) -> bool:
        return len(active) == stack.size + 1 and all(
            t["health"] == "up" and _epoch(t["lastScrape"]) >= since + interval_s
            for t in active)

    active = until(targets, scraped, f"every target of {stack.prometheus_url} up and scraped "
                   "twice since the pages were steady", timeout_s)
    last_scrape = max(_epoch(t["lastScrape"]) for t in active)

    def groups() -> list[dict[str, Any]]:
        return list(api(stack.prometheus_url, "rules")["groups"])

    until(groups, lambda gs: bool(gs) and all(_epoch(g["lastEvaluation"]) > last_scrape
                                              for g in gs),
          f"every rule group of {stack.prometheus_url} evaluated after those scrapes",
          timeout_s)


def _epoch(rfc3339: str) -> float:
    """A timestamp of Prometheus' API (RFC 3339) as epoch seconds."""
    return datetime.fromisoformat(rfc3339).timestamp()


# --- measuring -------------------------------------------------------------------------

def measure(stack: Stack) -> Measured:
    proxy = page_samples(stack.proxy_url)
    members = [name for name, labels in proxy if "instance_id" in labels]
    exporter = page_samples(stack.exporter_urls[0])
    kept = [name for name, _ in exporter if name.startswith("poolscope_")]
    stored = stored_series(stack.prometheus_url)
    return Measured(stack.size, len(proxy), len(members), len(exporter), len(kept),
                    dict(Counter(name for name, _ in exporter)), dict(Counter(members)),
                    head_series(stack.prometheus_url), stored,
                    ended_series(stack.prometheus_url, stack.started))


@contextmanager
def running_stack(workdir: Path, size: int, s: Settings) -> Iterator[Stack]:
    """One pool of `size` members and its Prometheus, stopped when the block ends."""
    (workdir / "logs").mkdir(parents=True, exist_ok=True)
    group = ProcessGroup(workdir / "logs")
    started = time.time()
    try:
        proxy_url, _ = start_proxy(group, PROXY_ID, "--strategy", "round_robin")
        gpus = ("--gpus", f"{GPU_MODEL}:{s.gpus}", "--max-running", str(SLOTS)) if s.gpus else ()
        exporters = []
        for i in range(size):
            instance_id = instance_id_of(PROXY_ID, i)
            engine_url, _ = start_sim_engine(group, instance_id, proxy_url, SLOTS, i,
                                             "--model", "bench", "--tokens-per-second",
                                             f"{TOKENS_PER_SECOND:g}")
            url, _ = start_instance_exporter(group, instance_id, PROXY_ID,
                                             f"{engine_url}/metrics", "vllm",
                                             simulated_gpus=gpus)
            exporters.append(url)
        config = prometheus_config(workdir, s.interval_s,
                                   [Pool(PROXY_ID, proxy_url, tuple(exporters))], {})
        port = port_or_free(0)
        prometheus_url = f"http://127.0.0.1:{port}"
        prom = group.start("prometheus", [
            prometheus_binary(None), f"--config.file={config}",
            f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{port}"])
        wait_ready(f"{prometheus_url}/-/ready", prom)
        yield Stack(size, proxy_url, tuple(exporters), prometheus_url, started)
    finally:
        group.stop()


def run(s: Settings, workdir: Path) -> Result:
    """Every size's stack side by side, measured once each is steady and scraped."""
    with ExitStack() as stacks:
        running = [stacks.enter_context(running_stack(workdir / f"size-{n}", n, s))
                   for n in s.sizes]
        for stack in running:
            wait_alive(stack, s.timeout_s)
        with ThreadPoolExecutor(len(running)) as pool:
            list(pool.map(send_requests, running))
        for stack in running:
            wait_steady(stack, s.timeout_s)
        since = time.time()
        for stack in running:
            wait_scraped_and_evaluated(stack, since, s.interval_s, s.timeout_s)
        return Result(tuple(measure(stack) for stack in running))


# --- reporting -------------------------------------------------------------------------

def _figure(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{float(value):.2f}"


def table(result: Result, by_family: bool = False) -> str:
    sizes = result.sizes
    rows: list[tuple[str, Callable[[Measured], int]]] = [
        ("Proxy /metrics, series", lambda m: m.proxy_page),
        ("  of them about one member", lambda m: m.proxy_page_members),
        ("one Instance exporter's /metrics, series", lambda m: m.exporter_page),
        ("  of them kept by the instance job", lambda m: m.exporter_kept),
        ("Prometheus head series", lambda m: m.head),
        *((f"  {group}", (lambda m, g=group: m.stored.get(g, 0))) for group in result.groups),
        ("  ended (no current sample)", lambda m: len(m.ended)),
    ]
    if any(m.unaccounted for m in sizes):
        rows.append(("  unaccounted (ended before the stack's start?)", lambda m: m.unaccounted))
    head = ["", *(f"{m.size} Instances" for m in sizes), "per Instance added"]
    lines = [head]
    for label, figure in rows:
        per = ("" if label.startswith("one Instance") or "kept by" in label
               else _figure(result.per_member(figure)))
        lines.append([label, *(str(figure(m)) for m in sizes), per])
    widths = [max(len(row[i]) for row in lines) for i in range(len(head))]
    out = ["| " + " | ".join(c.ljust(w) if i == 0 else c.rjust(w)
                             for i, (c, w) in enumerate(zip(row, widths, strict=True))) + " |"
           for row in lines]
    out.insert(1, "|" + "|".join("-" * (w + 1) + ("-" if i == 0 else ":")
                                 for i, w in enumerate(widths)) + "|")
    for m in sizes:
        out += [f"Ended at {m.size} Instances: {series}" for series in m.ended]
    if by_family:
        largest = sizes[-1]
        out += ["", "One Instance exporter's page, by family:"]
        out += [f"  {n:>3}  {name}" for name, n in sorted(largest.exporter_families.items())]
        out += ["", "The Proxy's page, per member, by family:"]
        out += [f"  {_figure(Fraction(n, largest.size)):>3}  {name}"
                for name, n in sorted(largest.proxy_member_families.items())]
    return "\n".join(out)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    d = Settings()
    p = argparse.ArgumentParser(prog="python -m bench.series_per_member",
                                description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=positive_ints, default=d.sizes, metavar="N,N[,...]",
                   help="fleet sizes, Instances in one pool, each a stack of its own "
                   "(default %(default)s)")
    p.add_argument("--gpus", type=non_negative_int, default=d.gpus,
                   help=f"simulated GPUs per Instance, all one model ({GPU_MODEL}); 0: none "
                   "(default %(default)d)")
    p.add_argument("--interval", type=positive_float, default=d.interval_s, metavar="S",
                   help="Prometheus' scrape and evaluation interval (default %(default)g)")
    p.add_argument("--timeout", type=positive_float, default=d.timeout_s, metavar="S",
                   help="the longest wait for each condition (default %(default)g)")
    p.add_argument("--by-family", action="store_true",
                   help="also list one exporter's and the Proxy's per-member series by family")
    p.add_argument("--workdir", type=Path, default=None,
                   help="logs, configs and Prometheus data (default: a temporary folder)")
    args = p.parse_args(argv)
    if len(set(args.sizes)) < 2 or list(args.sizes) != sorted(set(args.sizes)):
        p.error("argument --sizes: give two or more different sizes, smallest first")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    settings = Settings(tuple(args.sizes), args.gpus, args.interval, args.timeout)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="poolscope-series-"))
    try:
        result = run(settings, workdir)
    except (Unmeasurable, RuntimeError, TimeoutError, OSError) as e:
        print(f"bench.series_per_member: cannot measure: {e} (logs in {workdir})",
              file=sys.stderr)
        return 1
    print(f"One pool, {settings.gpus} GPUs of one model per Instance, "
          f"{settings.interval_s:g} s interval; logs in {workdir}\n")
    print(table(result, args.by_family))
    return 0


if __name__ == "__main__":
    unwind_on_sigterm()
    sys.exit(main())
