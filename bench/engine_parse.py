"""What reading one engine page costs the Instance exporter, per fixture.

    python -m bench.engine_parse [--repeat 100] [--against CHECKOUT]

Times `detect` plus `interpret` (auto-detection, as the exporter runs by
default) on every page in tests/fixtures/engines/ and prints a markdown table
of the median microseconds per read. With `--against` (another revision's
checkout, e.g. from `git worktree add /tmp/old REV`) both versions are imported
into this process and alternate on the same pages, 5 rounds, so their ratio is
measured in one window. The exporter reads its engine once a second: 1 ms here
is 0.1% of one core.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from bench.checkouts import import_root, module_name

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "engines"
ROUNDS = 5


def load_engine(root: Path) -> ModuleType:
    """The Instance exporter's engine module as the checkout at `root` has it."""
    for name in [m for m in sys.modules if m.split(".")[0] in ("poolscope", "exporters")]:
        del sys.modules[name]
    sys.path.insert(0, str(import_root(root)))
    try:
        module = importlib.import_module(module_name(root, "exporters.instance.engine"))
    finally:
        sys.path.pop(0)
    if not Path(module.__file__ or "").resolve().is_relative_to(root.resolve()):
        raise RuntimeError(f"imported {module.__file__}, not from {root}")
    return module


def median_us(engine: ModuleType, text: str, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        engine.interpret(text, engine.detect(text))
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=100)
    p.add_argument("--against", type=Path, help="another revision's checkout to compare with")
    args = p.parse_args(argv)
    versions = {"this": load_engine(REPO)}
    if args.against:
        versions = {"against": load_engine(args.against.resolve()), **versions}
    print("| page | bytes | " + " | ".join(f"{v} µs" for v in versions)
          + (" | ratio |" if args.against else " |"))
    print("| --- " * (2 + len(versions) + bool(args.against)) + "|")
    for page in sorted(FIXTURES.glob("*.txt")):
        text = page.read_text()
        try:
            rounds = [[median_us(e, text, args.repeat) for e in versions.values()]
                      for _ in range(ROUNDS)]
        except Exception as e:  # a page the other revision cannot read
            print(f"| `{page.name}` | {len(text):,} | {type(e).__name__} |")
            continue
        medians = [statistics.median(r[i] for r in rounds) for i in range(len(versions))]
        ratio = f" | {medians[1] / medians[0]:.2f}x" if args.against else ""
        print(f"| `{page.name}` | {len(text):,} | "
              + " | ".join(f"{m:,.0f}" for m in medians) + ratio + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
