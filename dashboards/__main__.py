"""`python -m dashboards [--check]`: write the Grafana JSON files, or fail when
the committed ones differ from what the generator makes."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from dashboards import HERE
from dashboards.poolscope import DASHBOARDS


def rendered() -> dict[Path, str]:
    """Each dashboard file and its exact committed text."""
    return {HERE / name: json.dumps(build(), indent=2) + "\n" for name, build in DASHBOARDS.items()}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dashboards", description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 when a committed file is out of date")
    args = p.parse_args(argv)
    stale = [path for path, text in rendered().items()
             if not path.exists() or path.read_text() != text]
    if args.check:
        for path in stale:
            print(f"{path.name} is out of date: run `python -m dashboards`", file=sys.stderr)
        return 1 if stale else 0
    for path, text in rendered().items():
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
