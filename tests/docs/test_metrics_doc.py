"""docs/metrics.md is the audit users read: it must match the code, row for row."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from poolscope.bridge.audit import PROCESS_SERIES, documented_path, render_into
from poolscope.contract import catalog
from poolscope.contract.fields import FIELDS, GPU_FIELDS

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "metrics.md"
# A series name, unless it is a prefix standing for a family (`poolscope_gpu_*`).
SERIES = re.compile(r"\b(poolscope_[a-z0-9_]*[a-z0-9]|(?:proxy_pool|instance|instance_gpu):"
                    r"[a-z0-9_:]*[a-z0-9])(?![a-z0-9_:]*\*)")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def known_series() -> set[str]:
    names = set()
    for fam in catalog.all_families():
        names.add(fam.name)
        if fam.kind == "histogram":
            names.update(fam.name + s for s in HISTOGRAM_SUFFIXES)
    names.update(name for name, *_ in PROCESS_SERIES)  # poolscope_build_info
    for rule_file in (REPO / "rules").glob("*.yml"):
        for group in yaml.safe_load(rule_file.read_text())["groups"]:
            names.update(r["record"] for r in group["rules"] if "record" in r)
    return names


def unknown_series(text: str) -> set[str]:
    return {m for m in SERIES.findall(text) if m not in known_series()}


def test_generated_tables_match_the_code() -> None:
    text = DOC.read_text()
    assert render_into(text) == text, "regenerate: python -m poolscope.bridge.audit --write ..."


@pytest.mark.parametrize("path", [documented_path(f.path) for f in (*FIELDS, *GPU_FIELDS)])
def test_every_summary_field_has_a_row(path: str) -> None:
    assert re.search(rf"^\| `{re.escape(path)}` \|", DOC.read_text(), re.MULTILINE)


def test_every_series_the_doc_names_is_produced_by_an_exporter_or_rule() -> None:
    assert unknown_series(DOC.read_text()) == set()


def test_the_series_check_catches_a_made_up_name() -> None:
    text = "| `load.x` | `proxy_pool:made_up:sum` | poolscope_gpu_* and poolscope_no_such_bytes |"
    assert unknown_series(text) == {"proxy_pool:made_up:sum", "poolscope_no_such_bytes"}
