"""The metric audit's tables, rendered from the code that defines the metrics.

`docs/metrics.md` holds these tables between generated-section markers; a test
fails when they drift from `fields.FIELDS` and `catalog`, so the documented
audit can never disagree with what the bridges serve.

    python -m poolscope.bridge.audit --write docs/metrics.md
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from poolscope.contract import catalog
from poolscope.contract.fields import FIELDS, GPU_FIELDS, GPU_MODEL_LABEL, GPUS_SECTION, Kind
from poolscope.exporters.instance import engine, engines
from poolscope.service import build

Renderer = Callable[[], str]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def documented_path(path: str) -> str:
    """`gpus.healthy` is `gpus.<gpu_model>.healthy` in the JSON: one object per model."""
    section, _, key = path.partition(".")
    return f"{section}.<{GPU_MODEL_LABEL}>.{key}" if section == GPUS_SECTION else path


def field_table() -> str:
    """One row per pool-summary field: where it comes from and when it is null."""
    rows = ["| field | rollup | raw series (exporter, lower-layer module) | classification "
            "| null when | level |",
            "| --- | --- | --- | --- | --- | --- |"]
    for f in (*FIELDS, *GPU_FIELDS):
        selector = "".join(f'{{{k}="{v}"}}' for k, v in f.matchers.items())
        unit = f" x {f.scale:g}" if f.scale != 1 else ""
        kind = f" ({f.state_label} state set)" if f.kind is Kind.STATE else ""
        rows.append(f"| `{documented_path(f.path)}` | `{f.rollup}{selector}`{unit}{kind} "
                    f"| {_cell(f.lower_layer)} "
                    f"| {f.classification} | {_cell(f.null_when)} | Scheduler |")
    return "\n".join(rows)


# On every service's page beside the catalog's, the bridges' included: the process'
# own series. They describe the process, not the cluster, so they carry no `source`.
_PROCESS_NOTE = " On every service's page; no `source`: it describes the process."
PROCESS_SERIES: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    (build.NAME, "gauge", build.LABELS, build.HELP + _PROCESS_NOTE),
    ("process_*", "counter, gauge", (),
     "prometheus_client's process collector: CPU seconds, resident and virtual memory, "
     "open and maximum file descriptors, start time." + _PROCESS_NOTE),
)


def series_table() -> str:
    """Every series the exporters publish, from the catalog, then the process' own."""
    rows = ["| series | type | labels | meaning |", "| --- | --- | --- | --- |"]
    for fam in catalog.all_families():
        labels = ", ".join(f"`{name}`" for name in fam.labels)
        rows.append(f"| `{fam.name}` | {fam.kind} | {labels} | {_cell(fam.help)} |")
    for name, kind, label_names, meaning in PROCESS_SERIES:
        labels = ", ".join(f"`{label}`" for label in label_names) or "-"
        rows.append(f"| `{name}` | {kind} | {labels} | {_cell(meaning)} |")
    return "\n".join(rows)


# The series each EngineMapping field feeds (the others are computed from these).
_ENGINE_SERIES = (*((a, f) for a, f in engine.PUBLISHED if a in engines.LOAD_FIELDS),
                  ("capacity", catalog.INSTANCE_CAPACITY),
                  ("awake", catalog.INSTANCE_ADMISSION_STATE))
# What a field that is not a sum means where an engine has it, and where it has not.
_STATE_READING = {"awake": ("0 on any rank: `asleep`", "none: never `asleep`")}


def _engine_field(mapping: engines.EngineMapping, attr: str) -> str:
    field: engines.Field = getattr(mapping, attr)
    if attr == "capacity" and mapping.slots_path:
        return (f"`total_slots` of `/{mapping.slots_path}` beside `/metrics` (its own collector, "
                "`engine_capacity`), else learned; --capacity overrides it")
    if not field:
        if attr in _STATE_READING:
            return _STATE_READING[attr][1]
        return "(--capacity, else learned)" if attr == "capacity" else "none: absent"
    text = " + ".join(_engine_series(series) for series in field)
    if attr in _STATE_READING:
        return f"{text} ({_STATE_READING[attr][0]})"
    derived = mapping.derivation(attr)
    if derived is not None:
        op = " - " if derived.op == "minus" else " / "
        text += f", else {_engine_series(derived.left)}{op}{_engine_series(derived.right)}"
    return text


def _engine_series(series: engines.Series) -> str:
    where = ",".join(f'{k}="{v}"' for k, v in series.where)
    text = ", else ".join(f"`{n}{{{where}}}`" if where else f"`{n}`" for n in series.names)
    return text + "".join(f' (its `{t}=""` total)' for t in series.totals)


def _combination(mapping: engines.EngineMapping) -> str:
    said = []
    if mapping.copies:
        said.append("copies (max): " + ", ".join(f"`{c}`" for c in mapping.copies))
    if mapping.aliases:
        said.append("also spelled: " + ", ".join(f"`{a}` for `{p}`" for p, a in mapping.aliases))
    return "; ".join(said) or "-"


def engine_table() -> str:
    """What each engine's page feeds into each engine series, from engines.MAPPINGS."""
    names = list(engines.MAPPINGS)
    rows = ["| series | " + " | ".join(f"`{n}`" for n in names) + " |",
            "| --- |" + " --- |" * len(names),
            "| detected by | " + " | ".join(", ".join(f"`{p}`" for p in m.detect)
                                           for m in engines.MAPPINGS.values()) + " |"]
    for attr, family in _ENGINE_SERIES:
        rows.append(f"| `{family.name}` | " + " | ".join(
            _cell(_engine_field(m, attr)) for m in engines.MAPPINGS.values()) + " |")
    rows.append("| label sets | " + " | ".join(
        _cell(_combination(m)) for m in engines.MAPPINGS.values()) + " |")
    return "\n".join(rows)


SECTIONS: dict[str, Renderer] = {"fields": field_table, "series": series_table,
                                 "engines": engine_table}


def _markers(name: str) -> tuple[str, str]:
    return (f"<!-- BEGIN GENERATED: {name} (python -m poolscope.bridge.audit) -->",
            f"<!-- END GENERATED: {name} -->")


def render_into(text: str) -> str:
    """`text` with every generated section replaced by its current rendering."""
    for name, render in SECTIONS.items():
        begin, end = _markers(name)
        pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
        if not pattern.search(text):
            raise ValueError(f"section markers for {name!r} not found")
        text = pattern.sub(lambda _m, b=begin, e=end, r=render: f"{b}\n{r()}\n{e}", text)
    return text


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Regenerate the audit tables in docs/metrics.md.")
    p.add_argument("--write", type=Path, required=True, help="the Markdown file to update")
    path = p.parse_args(argv).write
    path.write_text(render_into(path.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
