"""`python -m rules.render [--check]`: write rules/*.yml and docs/thresholds.md from
rules/src/ and contract/thresholds.py, or fail when a committed copy differs.

A template is the rule file itself with `${NAME}` where a threshold goes (`${NAME:duration}`
for seconds written as a PromQL duration), so it reads as PromQL and the numbers are
written only in thresholds.py.
"""

from __future__ import annotations

import argparse
import ast
import itertools
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from unittest import mock

from dashboards.__main__ import rendered as rendered_dashboards
from poolscope.contract import thresholds

REPO = Path(__file__).resolve().parents[1]
RULES = REPO / "rules"
TEMPLATES = RULES / "src"
DOC = REPO / "docs" / "thresholds.md"
SOURCE = Path(thresholds.__file__)
PLACEHOLDER = re.compile(r"\$\{([A-Z][A-Z0-9_]*)(:duration)?\}")
RECORD = re.compile(r"^\s*- (?:record|alert):\s*(\S+)")
GROUP = re.compile(r"^\s*- name:")

Value = float | str


def meanings() -> dict[str, str]:
    """Each threshold's meaning, the string under its assignment, in source order."""
    body = ast.parse(SOURCE.read_text()).body
    found: dict[str, str] = {}
    for stmt, after in itertools.pairwise(body):
        if (isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name)
                and stmt.targets[0].id.isupper()):
            if not (isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)):
                raise ValueError(f"{SOURCE.name}: {stmt.targets[0].id} has no meaning under it")
            found[stmt.targets[0].id] = " ".join(after.value.value.split())
    return found


def current() -> dict[str, Value]:
    """Every threshold's value as thresholds.py computes it, in source order."""
    return {name: getattr(thresholds, name) for name in meanings()}


def duration(seconds: float) -> str:
    """Whole seconds as a PromQL duration: 60 -> `1m`, 52 -> `52s`."""
    if seconds <= 0 or seconds != int(seconds):
        raise ValueError(f"a PromQL duration needs whole, positive seconds, not {seconds}")
    rest, parts = int(seconds), []
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def as_text(value: Value) -> str:
    """As the rules and the doc write it: 15.0 -> `15`."""
    return value if isinstance(value, str) else f"{value:g}"


def substitute(template: str, values: Mapping[str, Value]) -> str:
    """The template with every placeholder replaced; a name thresholds.py lacks fails."""
    def one(m: re.Match[str]) -> str:
        if m[1] not in values:
            raise KeyError(f"${{{m[1]}}}: no such threshold in {SOURCE.name}")
        value = values[m[1]]
        if not m[2]:
            return as_text(value)
        if isinstance(value, str):
            raise TypeError(f"{m[0]}: {m[1]} is not in seconds")
        return duration(value)
    return PLACEHOLDER.sub(one, template)


def render_rules(values: Mapping[str, Value] | None = None) -> dict[Path, str]:
    """Each rule file and its exact text."""
    values = current() if values is None else values
    return {RULES / t.name: f"# Rendered by `make generate` from {t.relative_to(REPO)}; edit "
                            "the template.\n" + substitute(t.read_text(), values)
            for t in sorted(TEMPLATES.glob("*.yml"))}


def rule_texts(text: str) -> dict[str, str]:
    """Each record's comment and body in a rule file (its label variants joined), so a
    threshold's users are found in what a rule says as well as in its expression."""
    texts: dict[str, str] = {}
    comment: list[str] = []
    record: str | None = None
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            record = None
            comment.append(line)
            continue
        if m := RECORD.match(line):
            record = m[1]
            texts[record] = texts.get(record, "") + "".join(comment) + line
        elif GROUP.match(line):
            record = None
        elif record is not None:
            texts[record] += line
        comment = []
    return texts


def _other(value: Value) -> Value:
    """A different value, to see what changes with it."""
    return value + "0" if isinstance(value, str) else value + 1000


def rules_using(name: str, values: Mapping[str, Value]) -> list[str]:
    """The records whose expression or comment changes with the threshold."""
    def records(vals: Mapping[str, Value]) -> dict[str, str]:
        return {r: t for text in render_rules(vals).values() for r, t in rule_texts(text).items()}
    before = records(values)
    after = records({**values, name: _other(values[name])})
    return [r for r in before if before[r] != after[r]]


def dashboards_using(name: str) -> list[str]:
    """The dashboards whose JSON changes with it (they read thresholds.py as they build)."""
    before = rendered_dashboards()
    with mock.patch.object(thresholds, name, _other(getattr(thresholds, name))):
        after = rendered_dashboards()
    return [path.name for path in before if before[path] != after[path]]


def _names(items: Sequence[str]) -> str:
    return ", ".join(f"`{i}`" for i in items) or "-"


def render_doc(values: Mapping[str, Value] | None = None) -> str:
    values = current() if values is None else values
    rows = [f"| `{name}` | {as_text(values[name])}{' s' if name.endswith('_S') else ''} "
            f"| {meaning} | {_names(rules_using(name, values))} "
            f"| {_names(dashboards_using(name))} |"
            for name, meaning in meanings().items()]
    return "\n".join((
        f"<!-- Rendered by `make generate` from {SOURCE.relative_to(REPO)}; edit that file. -->",
        "# Thresholds",
        "",
        f"Every threshold Poolscope judges by, from `{SOURCE.relative_to(REPO)}`: the",
        "exporters, the bridges and the dashboards import it, and the rule files (from",
        "`rules/src/`) and this page are rendered from it. Why the Instance's admission",
        "state judges by other numbers than the pool's saturation:",
        "`poolscope_instance_admission_state` in [metrics.md](metrics.md).",
        "",
        "| threshold | value | meaning | rules | dashboards |",
        "|---|---|---|---|---|",
        *rows,
        "",
    ))


def rendered(values: Mapping[str, Value] | None = None) -> dict[Path, str]:
    """Every file this module writes and its exact text."""
    return {**render_rules(values), DOC: render_doc(values)}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rules.render", description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 when a committed file is out of date")
    args = p.parse_args(argv)
    files = rendered()
    stale = [path for path, text in files.items()
             if not path.exists() or path.read_text() != text]
    if args.check:
        for path in stale:
            print(f"{path.relative_to(REPO)} is out of date: run `python -m rules.render`",
                  file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.write_text(files[path])
    return 0


if __name__ == "__main__":
    sys.exit(main())
