"""The packages follow the layers, and no module imports itself back.

contract (the metric catalog, thresholds and summary fields) and service (HTTP hardening,
flag types, ids) are the floor; the exporters sit on them; the
bridges' shared core (bridge) reads what the exporters publish; each bridge is built
from that core and never from the other bridge. A cycle is caught at module level,
TYPE_CHECKING imports included, since a cycle that only type checkers see still ties two
modules into one.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("contract", "service", "exporters", "bridge", "scheduler_bridge", "proxy_bridge")
OLD_TOP_LEVEL = PACKAGES
# What each package may import from the others (besides itself).
ALLOWED = {
    "contract": set(),
    "service": set(),
    "exporters": {"service", "contract"},
    "bridge": {"service", "contract", "exporters"},
    "scheduler_bridge": {"service", "contract", "exporters", "bridge"},
    "proxy_bridge": {"service", "contract", "exporters", "bridge"},
}


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return "poolscope." + ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Every poolscope module `path` imports, resolved to the module (not the name)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return {name for name in found if name.startswith("poolscope.")}


MODULES = {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
GRAPH = {mod: {m for m in _imports(path) if m in MODULES and m != mod}
         for mod, path in MODULES.items()}


def _package(module: str) -> str:
    return module.split(".")[1]


def test_every_import_stays_within_its_layer() -> None:
    wrong = sorted(f"{mod} imports {dep}" for mod, deps in GRAPH.items() for dep in deps
                   if _package(dep) != _package(mod)
                   and _package(dep) not in ALLOWED[_package(mod)])
    assert wrong == []


def test_no_import_cycle() -> None:
    state: dict[str, int] = {}  # 1 on the path, 2 done
    cycles: list[list[str]] = []

    def visit(mod: str, path: list[str]) -> None:
        state[mod] = 1
        for dep in sorted(GRAPH[mod]):
            if state.get(dep) == 1:
                cycles.append([*path[path.index(dep):], dep])
            elif dep not in state:
                visit(dep, [*path, dep])
        state[mod] = 2

    for mod in sorted(GRAPH):
        if mod not in state:
            visit(mod, [mod])
    assert cycles == []


def _absolute_imports(path: Path) -> list[str]:
    """The module each absolute `import` / `from ... import` statement in `path` names."""
    return [name for node in ast.walk(ast.parse(path.read_text(), str(path)))
            for name in ([a.name for a in node.names] if isinstance(node, ast.Import) else
                         [node.module or ""] if isinstance(node, ast.ImportFrom)
                         and node.level == 0 else [])]


@pytest.mark.parametrize("top", ["tests", "harness", "bench", "deploy", "dashboards", "rules",
                                 *PACKAGES])
def test_no_module_is_imported_by_its_checkout_name(top: str) -> None:
    """`exporters.x` and `poolscope.exporters.x` would be two copies of one module, each
    with its own state; everything is imported under the installed name."""
    stray = [f"{path.relative_to(ROOT)}: {name}" for path in (ROOT / top).rglob("*.py")
             for name in _absolute_imports(path) if name.split(".")[0] in OLD_TOP_LEVEL]
    assert stray == []


def test_no_command_runs_a_module_by_its_checkout_name() -> None:
    pattern = re.compile(r"-m[\"',\s]+(?:" + "|".join(OLD_TOP_LEVEL) + r")\b")
    stray = [f"{path.relative_to(ROOT)}: {m.group(0)}"
             for path in [ROOT / "Makefile", ROOT / "README.md",
                          *(p for top in ("tests", "harness", "bench", "deploy", "dashboards",
                                          "docs", *PACKAGES)
                            for p in (ROOT / top).rglob("*")
                            if p.suffix in (".py", ".md", ".yml", ".yaml", ".service"))]
             for m in pattern.finditer(path.read_text())]
    assert stray == []


# The folders that are not installed, and which of each other each may import (all may
# import poolscope). tests/ may import anything; nothing imports tests/ back, so the
# code the benchmarks and the demo run is never a test's helper.
CHECKOUT_ALLOWED = {
    "dashboards": set(),
    "rules": {"dashboards"},  # `make generate` renders the dashboards beside the rules
    "deploy": {"dashboards"},  # the demo serves the console it is drawn from
    "harness": {"deploy"},  # starts the demo's processes
    "bench": {"harness", "deploy", "dashboards", "rules"},
}
CHECKOUT_TOPS = ("tests", *CHECKOUT_ALLOWED)


@pytest.mark.parametrize("top", sorted(CHECKOUT_ALLOWED))
def test_checkout_folders_import_only_what_they_may(top: str) -> None:
    wrong = [f"{path.relative_to(ROOT)}: {name}" for path in (ROOT / top).rglob("*.py")
             for name in _absolute_imports(path)
             if name.split(".")[0] in {*CHECKOUT_TOPS} - {top, *CHECKOUT_ALLOWED[top]}]
    assert wrong == []
