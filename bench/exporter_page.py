"""What one scrape of the Instance exporter's page costs inside the process, per format.

    python -m bench.exporter_page [--calls 3000]

An exporter with three fake GPUs is sampled once; then its page is asked for
`--calls` times in each format (text 0.0.4, OpenMetrics 1.0.0) within one round,
so what is timed is what every scrape but the round's first pays: the cached part
served as bytes, the scrape-time part rendered. Prints a markdown table of the
mean milliseconds per page. HTTP is left out (bench.exporter_scrape_load has it).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence

from harness.fake_gpus import three_gpus
from poolscope.exporters.common.exposition import OPENMETRICS, TEXT
from poolscope.exporters.instance.server import PAGE_KEY, make_app
from poolscope.exporters.instance.service import InstanceExporter, Settings


async def measure(calls: int) -> list[tuple[str, float, int]]:
    exporter = InstanceExporter(Settings("bench-1", "bench-pool"), nvml=three_gpus().module())
    try:
        await exporter.loop.sample_all()
        page = make_app(exporter)[PAGE_KEY]
        rows = []
        for fmt in (TEXT, OPENMETRICS):
            size = len(page.page(fmt))  # the round's first page renders the cached part
            started = time.perf_counter()
            for _ in range(calls):
                page.page(fmt)
            rows.append((fmt.name, (time.perf_counter() - started) / calls * 1000, size))
        return rows
    finally:
        await exporter.stop()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.exporter_page",
                                description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=3000, help="pages per format (default 3000)")
    args = p.parse_args(argv)
    print("| format | ms per page (cached part, scrape-time part rendered) | bytes |")
    print("|---|---:|---:|")
    for name, ms, size in asyncio.run(measure(args.calls)):
        print(f"| {name} | {ms:.3f} | {size} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
