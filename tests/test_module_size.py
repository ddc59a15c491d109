"""No module of the product is over 400 lines.

A module that long holds more than one concern; split it by concern (one home per
concept, a name that says which) rather than raise the limit. The installed packages
are covered, and the checkout folders whose code runs beside them: the dashboards'
generator and the demo and deployment code.
"""

from __future__ import annotations

from pathlib import Path

from tests.test_layers import PACKAGES, ROOT

MAX_LINES = 400
COVERED = (*PACKAGES, "dashboards", "deploy")


def _modules() -> list[Path]:
    return sorted(p for top in COVERED for p in (ROOT / top).rglob("*.py"))


def test_the_covered_folders_hold_modules() -> None:
    """A renamed or moved folder must not leave the size test checking nothing."""
    assert all(any((ROOT / top).rglob("*.py")) for top in COVERED)


def test_no_module_is_over_400_lines() -> None:
    long = [f"{path.relative_to(ROOT)}: {n} lines" for path in _modules()
            if (n := len(path.read_text().splitlines())) > MAX_LINES]
    assert long == []
