"""What reading one engine page costs the Instance exporter, per fixture.

    python -m bench.engine_parse [--repeat 200]

Times `detect` plus `interpret` (auto-detection, as the exporter runs by
default) on every page in tests/fixtures/engines/, in one process, and prints
a markdown table of the median microseconds per page. The exporter reads its
engine once a second, so 1 ms here is 0.1% of one core.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

from exporters.instance.engine import detect, interpret

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "engines"


def median_us(text: str, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        interpret(text, detect(text))
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=200)
    repeat = p.parse_args(argv).repeat
    print("| page | bytes | median µs per read |\n| --- | --- | --- |")
    for page in sorted(FIXTURES.glob("*.txt")):
        text = page.read_text()
        print(f"| `{page.name}` | {len(text):,} | {median_us(text, repeat):,.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
