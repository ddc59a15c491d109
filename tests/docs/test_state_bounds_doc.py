"""docs/design.md's "Per-key state and its bounds": every test it names as pinning a
bound exists, so the table cannot point at a test renamed or removed."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"


def _section() -> str:
    text = DESIGN.read_text()
    start = text.index("## Per-key state and its bounds")
    return text[start:text.index("\n## ", start + 1)]


def _pins() -> list[tuple[str, str]]:
    """(file under tests/, test name) for every test a row names; `::name` alone
    continues the file named before it in the same cell."""
    pins = []
    for row in _section().splitlines():
        if not row.startswith("| `"):
            continue
        cell = row.rstrip("|").rsplit("|", 1)[-1]
        path = ""
        for written in re.findall(r"`([^`]*::test_\w+)`", cell):
            file, name = written.split("::")
            path = file or path
            pins.append((path, name))
    return pins


def _tests_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def test_every_test_the_bounds_table_names_exists() -> None:
    pins = _pins()
    assert len(pins) >= 15, pins  # the table was read, not skipped
    missing = [f"{file}::{name}" for file, name in pins
               if not (ROOT / "tests" / file).is_file()
               or name not in _tests_in(ROOT / "tests" / file)]
    assert not missing, missing
