"""What each recording rule makes Prometheus allocate, rule by rule, on a quiet server.

bench.rules_eval times whole rule sets while Prometheus scrapes, so it names the
slow rules but not where a set's garbage comes from, and the garbage is most of
what the rules cost (each read of a per-Instance series, each filter or join over
it, copies every member's sample; the collector pays for it on another core).
Here each rule set gets its own Prometheus over one simulated fleet
(bench.fleet_target) until its rules have run on the full fleet; then the fleet
stops, every Prometheus is reloaded with no scrape jobs and no rules, and each
rule's expression is asked `--repeat` times at one instant before the stop. The
difference of Prometheus' own `go_memstats_alloc_bytes_total` around those
queries, less that of as many `vector(0)` queries (the API's own share), is the
rule's allocation per evaluation; `evalTotalTime` is its evaluation time. With
nothing else running in the server, the figures repeat within a few percent
(docs/benchmarks.md).

    python -m bench.rule_alloc --instances 4000 \
        --rules bench/floor_rules --rules rules/proxy_pool.yml

Rows line up by field (the part of a record name after its level), so a floor
rule sits beside the rule it is the floor of.
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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from bench.rules_eval import (
    RuleSet,
    add_fleet_arguments,
    chosen_rule_sets,
    drop_rules,
    markdown_row,
    own_metric,
    warm_fleet,
)
from bench.teardown import unwind_on_sigterm
from harness.prometheus import Prometheus, stop_group

ALLOCATED = "go_memstats_alloc_bytes_total"
BASELINE = "vector(0)"


@dataclass
class Cost:
    bytes: float  # per evaluation
    seconds: float  # evalTotalTime, per evaluation


@dataclass
class SetCosts:
    name: str
    rules: dict[str, Cost] = field(default_factory=dict)  # row key -> cost

    @property
    def total(self) -> Cost:
        return Cost(sum(c.bytes for c in self.rules.values()),
                    sum(c.seconds for c in self.rules.values()))


def rule_exprs(files: Sequence[Path]) -> dict[str, str]:
    """Each rule's expression by row key: the field (record name past its level), with
    `#n` for the n-th rule of a state set."""
    exprs: dict[str, str] = {}
    seen: Counter[str] = Counter()
    for path in files:
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                if "record" not in rule:
                    continue
                key = rule["record"].split(":", 1)[-1]
                seen[key] += 1
                exprs[key if seen[key] == 1 else f"{key}#{seen[key]}"] = rule["expr"]
    return exprs


def _query(prom: Prometheus, expr: str, at: float) -> float:
    """evalTotalTime of one instant query."""
    params = urllib.parse.urlencode({"query": expr, "time": repr(at), "stats": "all"})
    with urllib.request.urlopen(f"{prom.url}/api/v1/query?{params}", timeout=300) as r:
        return float(json.load(r)["data"]["stats"]["timings"]["evalTotalTime"])


def _measure(prom: Prometheus, expr: str, at: float, repeat: int) -> Cost:
    _query(prom, expr, at)  # the first query of an expression warms its series' caches
    before = own_metric(prom.url, ALLOCATED)
    seconds = sum(_query(prom, expr, at) for _ in range(repeat))
    return Cost((own_metric(prom.url, ALLOCATED) - before) / repeat, seconds / repeat)


def measure(instances: int, proxies: int, gpus: int, repeat: int, workdir: Path,
            rule_sets: Sequence[RuleSet]) -> list[SetCosts]:
    with warm_fleet(instances, proxies, gpus, workdir, rule_sets) as warm:
        at = time.time() - 1
        stop_group(warm.process)
        for prom in warm.proms:
            drop_rules(prom, scraping=False)  # nothing allocates but the queries
        results = []
        for prom, (name, files) in zip(warm.proms, rule_sets, strict=True):
            base = _measure(prom, BASELINE, at, repeat)
            costs = SetCosts(name)
            for key, expr in rule_exprs(files).items():
                cost = _measure(prom, expr, at, repeat)
                costs.rules[key] = Cost(cost.bytes - base.bytes, cost.seconds)
            results.append(costs)
        return results


def table(instances: int, results: Sequence[SetCosts]) -> str:
    keys = list(dict.fromkeys(k for r in results for k in r.rules))
    head = [f"rule at {instances:,} Instances"]
    for r in results:
        head += [f"{r.name}: MB", "ms"]
    rows = [markdown_row(head), "|" + "---|" * len(head)]
    for key in keys:
        cells = [f"`{key}`"]
        for r in results:
            c = r.rules.get(key)
            cells += [f"{c.bytes / 1e6:.2f}", f"{c.seconds * 1000:.1f}"] if c else ["-", "-"]
        rows.append(markdown_row(cells))
    first = results[0].total
    totals = [r.total for r in results]
    rows.append(markdown_row(["**all rules**", *(cell for t in totals for cell in (
        f"{t.bytes / 1e6:.1f}", f"{t.seconds * 1000:.0f}"))]))
    rows.append(markdown_row([f"**÷ {results[0].name}**", *(cell for t in totals for cell in (
        f"{t.bytes / first.bytes:.2f}x", f"{t.seconds / first.seconds:.2f}x"))]))
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=4000)
    parser.add_argument("--repeat", type=int, default=5,
                        help="queries of each expression averaged")
    add_fleet_arguments(parser)
    args = parser.parse_args(argv)
    for flag in ("instances", "instances_per_proxy", "repeat"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1")
    rule_sets = chosen_rule_sets(args.rules)
    with tempfile.TemporaryDirectory(prefix="poolscope-rule-alloc-") as tmp:
        results = measure(args.instances, max(1, args.instances // args.instances_per_proxy),
                          args.gpus_per_instance, args.repeat, Path(tmp), rule_sets)
    print(table(args.instances, results))
    return 0


if __name__ == "__main__":
    unwind_on_sigterm()
    sys.exit(main())
