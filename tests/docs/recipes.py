"""docs/design.md's four recipes ("Changing the contract: four recipes"), read as data,
and a throwaway copy of the checkout to walk them in.

tests/docs/test_recipes.py applies each recipe's hand edits to a copy, runs the
Makefile's generate target there, and compares the files that changed with the files
the recipe names. The recipe is parsed from the doc, so the doc and the walk cannot
drift: a file the doc leaves out, or names wrongly as rendered, fails the walk.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DESIGN = REPO / "docs" / "design.md"
MAKEFILE = REPO / "Makefile"
SECTION = "## Changing the contract: four recipes"
# A file the doc names: a backticked relative path with a folder and an extension;
# `<engine>`-style placeholders stand for what the change is called.
FILE = re.compile(r"`((?:[\w.<>-]+/)+[\w.<>-]+\.\w+)`(\s*\(if\b)?")
STEP = re.compile(r"^(\d+)\. ")
# What the walks never compare: caches and the copy's own git folder.
# The checks run on the copy: quiet, and leaving no cache behind in it.
PYTEST = (sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider")
IGNORED = frozenset({".git", "__pycache__", ".pytest_cache", ".hypothesis", ".ruff_cache"})


@dataclass(frozen=True)
class Recipe:
    """The files one recipe names: edited by hand or rendered by `make generate`, each
    either always or only in the case an "(if ...)" after it says."""

    hand: frozenset[str]
    rendered: frozenset[str]
    hand_if: frozenset[str]
    rendered_if: frozenset[str]


def _steps(body: str) -> list[str]:
    """Each numbered step's text, its indented continuation lines joined to it; any
    paragraph after the steps (a note, the guards) is not a step."""
    steps: list[str] = []
    inside = False
    for line in body.splitlines():
        if STEP.match(line):
            steps.append(line)
            inside = True
        elif inside and line.startswith("   ") and line.strip():
            steps[-1] += " " + line.strip()
        else:
            inside = False
    return steps


def parse(text: str) -> dict[str, Recipe]:
    """Each recipe of the section, by its `### ` heading."""
    start = text.index(SECTION) + len(SECTION)
    end = text.find("\n## ", start)
    section = text[start:] if end < 0 else text[start:end]
    parts = re.split(r"^### (.+)$", section, flags=re.M)
    recipes: dict[str, Recipe] = {}
    for heading, body in zip(parts[1::2], parts[2::2], strict=True):
        found: dict[tuple[bool, bool], set[str]] = {(r, c): set() for r in (False, True)
                                                    for c in (False, True)}
        for step in _steps(body):
            rendered = STEP.sub("", step).startswith("`make generate`")
            for path, conditional in FILE.findall(step):
                found[(rendered, bool(conditional))].add(path)
        recipes[heading.strip()] = Recipe(
            frozenset(found[(False, False)]), frozenset(found[(True, False)]),
            frozenset(found[(False, True)]), frozenset(found[(True, True)]))
    return recipes


def expected(recipe: Recipe, takes: frozenset[str],
             names: Mapping[str, str]) -> tuple[set[str], set[str]]:
    """The files a walk must change by hand and by rendering: the recipe's own, and its
    conditional ones in the cases the walk takes, placeholders filled in."""
    def filled(paths: frozenset[str]) -> set[str]:
        out = set()
        for path in paths:
            for placeholder, name in names.items():
                path = path.replace(placeholder, name)
            out.add(path)
        return out
    return (filled(recipe.hand | (recipe.hand_if & takes)),
            filled(recipe.rendered | (recipe.rendered_if & takes)))


def mismatch(recipe: Recipe, takes: frozenset[str], names: Mapping[str, str],
             hand: set[str], rendered: set[str]) -> list[str]:
    """What the doc gets wrong about a walk that changed `hand` by hand and whose
    generation changed `rendered`; empty when it lists exactly those."""
    problems = []
    unlisted = takes - recipe.hand_if - recipe.rendered_if
    if unlisted:
        problems.append(f"the walk takes cases the recipe does not list: {sorted(unlisted)}")
    want_hand, want_rendered = expected(recipe, takes, names)
    for what, want, got in (("by hand", want_hand, hand),
                            ("by `make generate`", want_rendered, rendered)):
        if got - want:
            problems.append(f"changed {what} but not listed so: {sorted(got - want)}")
        if want - got:
            problems.append(f"listed as changed {what} but unchanged: {sorted(want - got)}")
    return problems


# --- the copy ----------------------------------------------------------------------

def copy_checkout(into: Path) -> Path:
    """The working tree's files as git sees them (tracked and untracked, not ignored),
    without the venv or any build output."""
    listed = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():  # a tracked file deleted in the working tree is skipped
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, into / name)
    return into


# The editable install maps `poolscope.*` to this checkout's folders; this finder, first
# on sys.meta_path, maps them to POOLSCOPE_CHECKOUT's instead, with real paths (a tree of
# links would make `__file__` a link and the rendered "from contract/..." lines wrong).
_SITECUSTOMIZE = textwrap.dedent('''\
    import os
    import sys
    from importlib.util import spec_from_file_location
    from pathlib import Path

    _ROOT = Path(os.environ["POOLSCOPE_CHECKOUT"])


    class _CheckoutFinder:
        @classmethod
        def find_spec(cls, fullname, path=None, target=None):
            parent, _, child = fullname.partition(".")
            init = _ROOT / child / "__init__.py"
            if parent == "poolscope" and child and "." not in child and init.is_file():
                return spec_from_file_location(
                    fullname, init, submodule_search_locations=[str(init.parent)])
            return None


    sys.meta_path.insert(0, _CheckoutFinder)
''')


def checkout_env(checkout: Path, site: Path) -> dict[str, str]:
    """The environment in which `python` imports `poolscope.*` from `checkout`."""
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    return {**os.environ, "PYTHONPATH": str(site), "POOLSCOPE_CHECKOUT": str(checkout),
            "PYTHONDONTWRITEBYTECODE": "1"}


def generate_commands(makefile: Path = MAKEFILE) -> list[list[str]]:
    """The Makefile's generate recipe, each command with `$(PY)` this Python: the walk
    runs what `make generate` runs, without make's venv prerequisite."""
    text = makefile.read_text().replace("\\\n", " ")
    body = re.search(r"^generate:.*\n((?:\t.*\n)+)", text, flags=re.M)
    if body is None:
        raise ValueError(f"{makefile.name} has no generate target")
    return [[sys.executable if word == "$(PY)" else word for word in shlex.split(line)]
            for line in body[1].splitlines()]


def run(command: list[str], checkout: Path, env: Mapping[str, str],
        timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=checkout, env=dict(env), capture_output=True,
                          text=True, timeout=timeout, check=False)


def generate(checkout: Path, env: Mapping[str, str]) -> None:
    for command in generate_commands():
        done = run(command, checkout, env)
        assert done.returncode == 0, f"{shlex.join(command)}:\n{done.stdout}{done.stderr}"


def snapshot(checkout: Path) -> dict[str, str]:
    """Each file's digest, by path relative to the checkout."""
    return {path.relative_to(checkout).as_posix():
            hashlib.sha256(path.read_bytes()).hexdigest()
            for path in checkout.rglob("*")
            if path.is_file() and not IGNORED & set(path.relative_to(checkout).parts)}


def changed(before: Mapping[str, str], after: Mapping[str, str]) -> set[str]:
    return {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}


def insert_after(path: Path, anchor: str, text: str) -> None:
    """`text` after the one occurrence of `anchor`: a walk's edit that no longer finds
    its place says so rather than editing elsewhere."""
    old = path.read_text()
    count = old.count(anchor)
    assert count == 1, f"{path.name}: {count} places match {anchor!r}; update the walk"
    path.write_text(old.replace(anchor, anchor + text))
