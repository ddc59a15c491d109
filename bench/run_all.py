"""`make bench`: every benchmark, one after another, each printing its own table.

They run in separate processes so one benchmark's servers and memory cannot
colour the next one's figures. Results go to docs/benchmarks.md by hand, with
the command that produced them.
"""

from __future__ import annotations

import subprocess
import sys

BENCHMARKS = (
    ("bench.instance_exporter",),
    ("bench.rules_eval", "--instances", "1000,4000,16000"),
    ("bench.scheduler_bridge", "--pools", "10,100,1000"),
    ("bench.bridge_load", "--clients", "200", "--duration", "30"),
    ("bench.exporter_scrape_load",),
    ("bench.propagation", "--samples", "20"),
)


def main() -> int:
    failed = []
    for module, *args in BENCHMARKS:
        print(f"\n## {module} {' '.join(args)}\n", flush=True)
        if subprocess.run([sys.executable, "-m", module, *args], check=False).returncode:
            failed.append(module)
    if failed:
        print(f"missed a target or failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
