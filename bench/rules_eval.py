"""How long the recording rules take at fleet scale, measured by Prometheus itself.

For each fleet size: a fleet target (bench.fleet_target) in its own process,
a real Prometheus scraping it every 5 s and evaluating the rules every 5 s.
Once every group has seen a full fleet, /api/v1/rules is polled twice per
interval for `--evaluations` intervals; every distinct evaluation (told apart
by its lastEvaluation) contributes its group's evaluationTime — the value
Prometheus also exports as prometheus_rule_group_last_duration_seconds — and
each rule's own evaluationTime, so one slow or lucky evaluation cannot stand
for the fleet size, and the rules that dominate are named.

The same box runs the scraper, the rule engine and the fleet target (and, on
a shared box, whatever else), and a group's evaluationTime is wall-clock time:
a descheduled rule looks slow. So the CPU each process used over the window is
reported beside the rule times, and so is the rules' own CPU: Prometheus' CPU
with the rules, minus its CPU over an equal window after a reload without them
(scraping unchanged). That difference, per 5 s interval, is what the rules
cost however busy the box is. Beside it, the bytes the rules make Prometheus
allocate per interval, the same difference of its own go_memstats_alloc_bytes_total:
a rule's cost is mostly the garbage its evaluation leaves (each read of a
per-Instance series, each filter or join over it, copies every member's sample),
which the garbage collector then pays for on another core, and unlike CPU time it
moves little with the box's load: a rule set's figure held within 1-7% across runs
of one day where its CPU moved by up to 40% (docs/benchmarks.md).

The target: at 16,000 Instances every group together stays under 10%
of the 5 s interval, and the cost grows linearly with the fleet.

    python -m bench.rules_eval --instances 1000,4000,16000

To compare two versions of the rules, give --rules once per version: each gets
its own Prometheus on the same fleet, timed over the same window, and the rule
table puts their rules side by side.

    python -m bench.rules_eval --instances 1000 --rules /tmp/old-rules --rules rules

A rule set with alerts (a file with an `alert:` rule; all its groups count as the
alerts', the records the alerts alone read included) is timed beside its
recording rules: after the window, Prometheus is reloaded with the recording
files only for an equal window, then with none, so the alerts' CPU and
allocation are the first difference and the recording rules' the second; group
times are per 5 s (an alert group evaluating every 15 s costs a third of its
evaluation time per 5 s). The alerts read some inputs over hours (ALERT_MEMORY_S),
which a fresh Prometheus does not hold: --history 6h backfills that much of every
series a rule reads over a window longer than the warm-up (bench.backfill), so
the figure is the steady-state cost an operator pays.

    python -m bench.rules_eval --instances 1000,4000 --history 6h --rules rules
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml

from bench.backfill import HISTORY_FLAGS, backfill, duration_s, long_windows
from bench.teardown import unwind_on_sigterm
from harness.prometheus import (
    REPO,
    Prometheus,
    free_port,
    running_prometheus,
    stop_group,
    wait_http,
)

INTERVAL_S = 5.0
BUDGET_RATIO = 0.10
TOP_RULES = 8


@dataclass
class Usage:
    """CPU seconds a process used over a window, and its memory at the end."""

    process: psutil.Process
    url: str | None = None  # a Prometheus: its allocations are counted too
    cpu_start: float = 0.0
    cpu_s: float = 0.0
    rss_bytes: int = 0
    alloc_start: float = 0.0
    alloc_bytes: float = 0.0

    def begin(self) -> None:
        self.cpu_start = _cpu_seconds(self.process)
        if self.url is not None:
            self.alloc_start = own_metric(self.url, "go_memstats_alloc_bytes_total")

    def end(self) -> None:
        self.cpu_s = _cpu_seconds(self.process) - self.cpu_start
        self.rss_bytes = sum(p.memory_info().rss for p in _tree(self.process))
        if self.url is not None:
            self.alloc_bytes = (own_metric(self.url, "go_memstats_alloc_bytes_total")
                                - self.alloc_start)


def _tree(process: psutil.Process) -> list[psutil.Process]:
    return [process, *process.children(recursive=True)]


def _cpu_seconds(process: psutil.Process) -> float:
    return sum(t.user + t.system for t in (p.cpu_times() for p in _tree(process)))


@dataclass
class Result:
    instances: int
    series: int  # TSDB head series, raw and recorded
    target_series: int  # what the fleet target serves
    window_s: float
    group_seconds: dict[str, list[float]] = field(default_factory=dict)
    rule_seconds: dict[str, list[float]] = field(default_factory=dict)
    cpu_cores: dict[str, float] = field(default_factory=dict)  # process -> cores used
    rss_gib: dict[str, float] = field(default_factory=dict)
    rules: str = "rules"  # which rule set (--rules) was timed
    box_busy: float = 0.0  # share of all cores busy over the window
    rules_cpu_s: float = 0.0  # Prometheus CPU seconds per interval the rules add
    rules_alloc_bytes: float = 0.0  # bytes per interval the rules make Prometheus allocate
    pools: int = 0
    history_s: float = 0.0  # history backfilled for the long windows (--history)
    group_interval: dict[str, float] = field(default_factory=dict)  # group -> its interval, s
    alert_groups: set[str] = field(default_factory=set)  # groups of the files with alerts
    # With alerts: Prometheus CPU seconds and bytes per interval each part adds.
    alerts_cpu_s: float = 0.0
    alerts_alloc_bytes: float = 0.0
    recording_cpu_s: float = 0.0
    recording_alloc_bytes: float = 0.0

    def group_mean(self, group: str) -> float:
        return statistics.fmean(self.group_seconds[group])

    def per_interval(self, group: str) -> float:
        """A group's mean evaluation time per 5 s: one evaluating every 15 s costs a third."""
        return self.group_mean(group) * INTERVAL_S / self.group_interval.get(group, INTERVAL_S)

    def groups_seconds(self, alerts: bool) -> float:
        """The alert groups' (or the other groups') evaluation time per 5 s."""
        return sum(self.per_interval(g) for g in self.group_seconds
                   if (g in self.alert_groups) == alerts)

    @property
    def total_seconds(self) -> float:
        return sum(self.per_interval(g) for g in self.group_seconds)

    @property
    def ratio(self) -> float:
        return self.total_seconds / INTERVAL_S


def _fleet(instances: int, proxies: int, gpus: int, port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.fleet_target", f"--instances={instances}",
         f"--proxies={proxies}", f"--gpus-per-instance={gpus}", f"--port={port}"],
        stdout=subprocess.DEVNULL, start_new_session=True)


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.load(r)


def _scrape_config(port: int, paths: Sequence[str]) -> dict[str, object]:
    """One job, one target per fleet shard; honor_labels keeps the fleet's ids."""
    return {
        "job_name": "fleet",
        "scrape_interval": f"{INTERVAL_S:g}s",
        "scrape_timeout": f"{INTERVAL_S:g}s",
        "honor_labels": True,
        "static_configs": [{"targets": [f"127.0.0.1:{port}"],
                            "labels": {"__metrics_path__": p, "shard": p}} for p in paths],
    }


def _sample_rules(prom: Prometheus, result: Result, seen: dict[str, str]) -> None:
    """Record each group evaluation not seen yet, with its rules' own times."""
    for group in _get(f"{prom.url}/api/v1/rules")["data"]["groups"]:
        name = group["name"]
        if seen.get(name) == group["lastEvaluation"]:
            continue
        seen[name] = group["lastEvaluation"]
        result.group_interval[name] = float(group["interval"])
        result.group_seconds.setdefault(name, []).append(group["evaluationTime"])
        occurrences: dict[str, int] = {}
        for rule in group["rules"]:
            # Rules of one name (a state set) are told apart by their order
            # among themselves, not by position in the group, so a rule keeps
            # its key when another version of the file adds or drops others.
            n = occurrences[rule["name"]] = occurrences.get(rule["name"], 0) + 1
            key = f"{name} {rule['name']}" + (f" ({n})" if n > 1 else "")
            result.rule_seconds.setdefault(key, []).append(rule["evaluationTime"])


def drop_rules(prom: Prometheus, *, scraping: bool = True, keep: Sequence[Path] = ()) -> None:
    """Reload Prometheus with the rule files `keep` only, and with its scrape jobs or none."""
    path = prom.workdir / "prometheus.yml"
    config = yaml.safe_load(path.read_text())
    config["rule_files"] = [str(f) for f in keep]
    if not scraping:
        config["scrape_configs"] = []
    path.write_text(yaml.safe_dump(config))
    urllib.request.urlopen(urllib.request.Request(f"{prom.url}/-/reload", method="POST"),
                           timeout=60).close()
    kept = {name for f in keep for name in group_names(f)}
    deadline = time.monotonic() + 60
    while {g["name"] for g in _get(f"{prom.url}/api/v1/rules")["data"]["groups"]} != kept:
        if time.monotonic() > deadline:
            raise TimeoutError("Prometheus kept other rules after a reload")
        time.sleep(0.5)


def group_names(path: Path) -> list[str]:
    return [g["name"] for g in yaml.safe_load(path.read_text())["groups"]]


def has_alerts(path: Path) -> bool:
    """Whether a rule file holds an alert: then all its groups count as the alerts'."""
    return any("alert" in r for g in yaml.safe_load(path.read_text())["groups"]
               for r in g["rules"])


def own_metric(url: str, name: str) -> float:
    """A sample of Prometheus' own /metrics: it does not scrape itself here."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(f"{name} "):
                return float(line.split()[1])
    raise RuntimeError(f"Prometheus exports no {name}")


RuleSet = tuple[str, Sequence[Path]]  # a name for the tables, and its rule files


@dataclass
class WarmFleet:
    """A fleet target and a Prometheus per rule set scraping it, every rule run over it."""

    process: subprocess.Popen[bytes]
    series: int  # what the fleet target serves
    proms: list[Prometheus]


@contextlib.contextmanager
def warm_fleet(instances: int, proxies: int, gpus: int, workdir: Path,
               rule_sets: Sequence[RuleSet], history_s: float = 0.0) -> Iterator[WarmFleet]:
    """Yield once every target is up and every rule has run over the full fleet; stop all after.

    With `history_s`, each Prometheus holds that much history of the series its rules
    read over long windows (bench.backfill) before it is yielded.
    """
    port = free_port()
    fleet = _fleet(instances, proxies, gpus, port)
    tsdb: dict[str, Any] = ({"retention": f"{int(history_s) + 3600}s", "flags": HISTORY_FLAGS}
                            if history_s else {})
    try:
        wait_http(f"http://127.0.0.1:{port}/targets", timeout=600)
        info = _get(f"http://127.0.0.1:{port}/targets")
        with contextlib.ExitStack() as stack:
            proms = [stack.enter_context(running_prometheus(
                workdir / str(i), [_scrape_config(port, info["paths"])], rule_files=files,
                evaluation_interval=f"{INTERVAL_S:g}s", **tsdb))
                for i, (_, files) in enumerate(rule_sets)]
            for prom in proms:
                prom.wait_for(f'count(up == 1) == {len(info["paths"])}', timeout=600)
                # Rates need two scrapes and the pool groups read the instance
                # group's output: let every group see a full fleet before sampling.
                # Asked of the raw series, so any rule set (--rules) can be timed.
                prom.wait_for("rate(poolscope_proxy_requests_total[1m])", timeout=600)
            if history_s:
                time.sleep(2 * INTERVAL_S)  # every group has recorded what is backfilled
                for prom, (name, files) in zip(proms, rule_sets, strict=True):
                    written = backfill(prom, long_windows(files, INTERVAL_S, INTERVAL_S), history_s)
                    print(f"{instances} Instances, {name}: {written:,} samples of history "
                          "backfilled", file=sys.stderr, flush=True)
            time.sleep(3 * INTERVAL_S)
            yield WarmFleet(fleet, int(info["series"]), proms)
    finally:
        stop_group(fleet)


def measure(instances: int, proxies: int, gpus: int, evaluations: int, workdir: Path,
            rule_sets: Sequence[RuleSet], history_s: float = 0.0) -> list[Result]:
    """Run one fleet size until every target is up and rules are warm, then sample.

    Each rule set gets its own Prometheus, all scraping the one fleet and sampled
    over the same window: on a shared box the load varies from one minute to
    the next by more than a rule change saves, so two versions are only
    comparable when they are timed side by side.
    """
    with warm_fleet(instances, proxies, gpus, workdir, rule_sets, history_s) as warm:
        proms = warm.proms
        fleet_usage = Usage(psutil.Process(warm.process.pid))
        usages = [Usage(psutil.Process(_pid(prom)), prom.url) for prom in proms]
        results = [Result(instances, 0, warm.series, 0.0, rules=name, pools=proxies,
                          history_s=history_s,
                          alert_groups={g for f in files if has_alerts(f) for g in group_names(f)})
                   for name, files in rule_sets]
        seen: list[dict[str, str]] = [{} for _ in proms]
        for prom, result, s in zip(proms, results, seen, strict=True):
            _sample_rules(prom, result, s)  # the evaluation in progress is not timed
            result.group_seconds.clear()
            result.rule_seconds.clear()
        for u in (fleet_usage, *usages):
            u.begin()
        box_start = psutil.cpu_times()
        started = time.monotonic()
        for _ in range(2 * evaluations):
            time.sleep(INTERVAL_S / 2)
            for prom, result, s in zip(proms, results, seen, strict=True):
                _sample_rules(prom, result, s)
        window_s = time.monotonic() - started
        box = psutil.cpu_times()
        busy = sum(box) - sum(box_start) - (box.idle - box_start.idle)
        fleet_usage.end()
        # Every window closes before any reload: a set ended after another's reload
        # would be charged for the extra seconds (the set named last came out dearest).
        for u in usages:
            u.end()
        for prom, result, u in zip(proms, results, usages, strict=True):
            result.window_s = window_s
            result.box_busy = busy / (sum(box) - sum(box_start))
            result.cpu_cores = {"prometheus": u.cpu_s / window_s,
                                "fleet target": fleet_usage.cpu_s / window_s}
            result.rss_gib = {"prometheus": u.rss_bytes / 2**30,
                              "fleet target": fleet_usage.rss_bytes / 2**30}
            result.series = int(own_metric(prom.url, "prometheus_tsdb_head_series"))
        with_rules = [(u.cpu_s, u.alloc_bytes) for u in usages]
        recording_only = with_rules
        if any(r.alert_groups for r in results):
            recording_only = _window_with(proms, usages, window_s, [
                [f for f in files if not has_alerts(f)] for _, files in rule_sets])
        scrape_only = _window_with(proms, usages, window_s, [[] for _ in rule_sets])
        for result, (cpu, alloc), (rec_cpu, rec_alloc), (none_cpu, none_alloc) in zip(
                results, with_rules, recording_only, scrape_only, strict=True):
            def per_interval(amount: float) -> float:
                return amount / window_s * INTERVAL_S
            result.rules_cpu_s = per_interval(cpu - none_cpu)
            result.rules_alloc_bytes = per_interval(alloc - none_alloc)
            result.recording_cpu_s = per_interval(rec_cpu - none_cpu)
            result.recording_alloc_bytes = per_interval(rec_alloc - none_alloc)
            result.alerts_cpu_s = per_interval(cpu - rec_cpu)
            result.alerts_alloc_bytes = per_interval(alloc - rec_alloc)
    return results


def _window_with(proms: Sequence[Prometheus], usages: Sequence[Usage], window_s: float,
                 files: Sequence[Sequence[Path]]) -> list[tuple[float, float]]:
    """Each Prometheus' CPU seconds and bytes allocated over `window_s` with these rule
    files only (scraping unchanged), once every one has reloaded and settled an interval."""
    for prom, keep in zip(proms, files, strict=True):
        drop_rules(prom, keep=keep)
    time.sleep(INTERVAL_S)
    for u in usages:
        u.begin()
    time.sleep(window_s)
    for u in usages:
        u.end()
    return [(u.cpu_s, u.alloc_bytes) for u in usages]


def _pid(prom: Prometheus) -> int:
    assert prom.process is not None
    return prom.process.pid


def markdown_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def table(results: Sequence[Result]) -> str:
    """Per-group mean seconds, share of the interval, series per Instance, CPU and memory."""
    groups = sorted({g for r in results for g in r.group_seconds})
    head = ["Instances", "rules", "head series", "series / Instance", *groups, "all groups",
            "of 5 s", "evals", "rules CPU / 5 s", "rules alloc / 5 s", "Prometheus CPU",
            "target CPU", "box busy", "Prometheus RSS"]
    rows = [markdown_row(head), "|" + "---|" * len(head)]
    for r in results:
        rows.append(markdown_row([
            f"{r.instances:,}", r.rules, f"{r.series:,}", f"{r.series / r.instances:.1f}",
            *(f"{r.group_mean(g) * 1000:.1f} ms" if g in r.group_seconds else "-"
              for g in groups),
            f"{r.total_seconds * 1000:.1f} ms", f"{r.ratio:.1%}",
            str(min(len(v) for v in r.group_seconds.values())),
            f"{r.rules_cpu_s * 1000:.0f} ms ({r.rules_cpu_s / INTERVAL_S:.1%})",
            f"{r.rules_alloc_bytes / 2**20:.1f} MiB",
            f"{r.cpu_cores['prometheus']:.2f} cores", f"{r.cpu_cores['fleet target']:.2f} cores",
            f"{r.box_busy:.0%} of {psutil.cpu_count()}",
            f"{r.rss_gib['prometheus']:.1f} GiB"]))
    return "\n".join(rows)


def rule_table(results: Sequence[Result], top: int = TOP_RULES) -> str:
    """The rules that cost most at one fleet size: mean evaluationTime and share, per rule set.

    `results` are the rule sets timed side by side at that size; a rule one set
    lacks shows "-". Rules are ranked by their dearest set.
    """
    means = [{k: statistics.fmean(v) for k, v in r.rule_seconds.items()} for r in results]
    totals = [sum(m.values()) for m in means]
    ranked = sorted({k for m in means for k in m}, key=lambda k: -max(m.get(k, 0) for m in means))
    head = [f"rule at {results[0].instances:,} Instances"]
    for r in results:
        head += [f"{r.rules}: mean", "share"]
    rows = [markdown_row(head), "|" + "---|" * len(head)]
    for k in ranked[:top]:
        cells = [f"`{k}`"]
        for m, total in zip(means, totals, strict=True):
            cells += ([f"{m[k] * 1000:.1f} ms", f"{m[k] / total:.0%}"] if k in m else ["-", "-"])
        rows.append(markdown_row(cells))
    return "\n".join(rows)


def alerts_table(results: Sequence[Result]) -> str:
    """The alert groups beside the recording rules, per 5 s: group time, CPU, allocation."""
    def ratio(a: float, b: float) -> str:
        return f"{a / b:.2f}x" if b > 0 else "-"
    head = ["Instances", "pools", "rules", "history", "recording groups / 5 s",
            "alert groups / 5 s", "ratio", "recording CPU / 5 s", "alerts CPU / 5 s", "ratio",
            "recording alloc / 5 s", "alerts alloc / 5 s", "ratio"]
    rows = [markdown_row(head), "|" + "---|" * len(head)]
    for r in (r for r in results if r.alert_groups):
        recording, alerts = r.groups_seconds(alerts=False), r.groups_seconds(alerts=True)
        rows.append(markdown_row([
            f"{r.instances:,}", f"{r.pools:,}", r.rules, f"{r.history_s / 3600:g} h",
            f"{recording * 1000:.1f} ms", f"{alerts * 1000:.1f} ms", ratio(alerts, recording),
            f"{r.recording_cpu_s * 1000:.0f} ms", f"{r.alerts_cpu_s * 1000:.0f} ms",
            ratio(r.alerts_cpu_s, r.recording_cpu_s),
            f"{r.recording_alloc_bytes / 2**20:.1f} MiB",
            f"{r.alerts_alloc_bytes / 2**20:.1f} MiB",
            ratio(r.alerts_alloc_bytes, r.recording_alloc_bytes)]))
    return "\n".join(rows)


def history(text: str) -> float:
    """--history: a Prometheus duration (`6h`), in seconds."""
    try:
        seconds = duration_s(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e
    if seconds <= 0:
        raise argparse.ArgumentTypeError("expected a duration over 0, like 6h")
    return seconds


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The flags; a bad one exits 2 with one line naming it, before anything starts."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", default="1000,4000,16000",
                        help="comma-separated fleet sizes")
    parser.add_argument("--evaluations", type=int, default=20,
                        help="rule evaluation intervals sampled per fleet size (mean reported)")
    parser.add_argument("--top-rules", type=int, default=TOP_RULES,
                        help="slowest rules listed per fleet size")
    parser.add_argument("--history", type=history, default=0.0,
                        help="backfill this much history (a Prometheus duration: 6h) of every "
                        "series a rule reads over a long window, as a server up that long holds")
    add_fleet_arguments(parser)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    rule_sets = chosen_rule_sets(args.rules)
    by_size: list[list[Result]] = []
    for n in (int(x) for x in args.instances.split(",")):
        with tempfile.TemporaryDirectory(prefix="poolscope-rules-eval-") as tmp:
            results = measure(n, max(1, n // args.instances_per_proxy), args.gpus_per_instance,
                              args.evaluations, Path(tmp), rule_sets, args.history)
        for r in results:
            print(f"{n} Instances, {r.rules}: {r.total_seconds * 1000:.1f} ms ({r.ratio:.1%}), "
                  f"rules CPU {r.rules_cpu_s * 1000:.0f} ms per interval, "
                  f"rules alloc {r.rules_alloc_bytes / 2**20:.1f} MiB, "
                  f"box {r.box_busy:.0%} busy",
                  file=sys.stderr, flush=True)
        by_size.append(results)
    print(table([r for results in by_size for r in results]))
    if any(r.alert_groups for results in by_size for r in results):
        print()
        print(alerts_table([r for results in by_size for r in results]))
    for results in by_size:
        print()
        print(rule_table(results, args.top_rules))
    return 0 if all(r.ratio < BUDGET_RATIO for results in by_size for r in results) else 1


def add_fleet_arguments(parser: argparse.ArgumentParser) -> None:
    """The simulated fleet's shape and the rule sets, as every rules benchmark takes them."""
    parser.add_argument("--instances-per-proxy", type=int, default=100)
    parser.add_argument("--gpus-per-instance", type=int, default=2)
    parser.add_argument("--rules", type=Path, action="append",
                        help="rule file, or directory of them (default rules/); repeat it "
                        "to put several versions side by side, each in its own Prometheus "
                        "scraping the same fleet")


def chosen_rule_sets(paths: Sequence[Path] | None) -> list[RuleSet]:
    dirs = [d.resolve() for d in paths or [REPO / "rules"]]
    return [(set_name(d, dirs), sorted(d.glob("*.yml")) if d.is_dir() else [d]) for d in dirs]


def set_name(path: Path, paths: Sequence[Path]) -> str:
    """The shortest name that tells the rule sets apart in the tables."""
    if len({p.name for p in paths}) == len(paths):
        return path.name
    return str(path)


if __name__ == "__main__":
    unwind_on_sigterm()
    sys.exit(main())
