"""`make bench`: every benchmark, one after another, each printing its own table.

They run in separate processes so one benchmark's servers and memory cannot
colour the next one's figures. Results go to docs/benchmarks.md by hand, with
the command that produced them.
"""

from __future__ import annotations

import subprocess
import sys

from bench.teardown import unwind_on_sigterm

BENCHMARKS = (
    ("bench.instance_exporter",),
    ("bench.rules_eval", "--instances", "1000,4000,16000"),
    ("bench.rule_alloc", "--rules", "bench/floor_rules", "--rules", "rules/proxy_pool.yml"),
    ("bench.scheduler_bridge", "--pools", "10,100,1000"),
    ("bench.bridge_load", "--clients", "200", "--duration", "30"),
    ("bench.exporter_scrape_load",),
    ("bench.propagation", "--samples", "20", "--backends", "single,federated,victoria"),
    ("bench.status_page", "--pools", "1000"),
    ("bench.scheduling",),
    ("bench.scheduling.simulate", "--validate"),
    ("bench.picker_speed",),
    ("bench.churn_soak",),
    ("bench.series_per_member",),
)


def main() -> int:
    failed = []
    for module, *args in BENCHMARKS:
        print(f"\n## {module} {' '.join(args)}\n", flush=True)
        bench = subprocess.Popen([sys.executable, "-m", module, *args])
        try:
            if bench.wait():
                failed.append(module)
        except SystemExit:  # pass a SIGTERM on, so the benchmark stops what it started
            bench.terminate()
            bench.wait()
            raise
    if failed:
        print(f"missed a target or failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    unwind_on_sigterm()
    sys.exit(main())
