"""The pool summary's and the load report's JSON Schemas, shipped with the package for
consumers and tests; rendered from contract/fields.py by poolscope.bridge.render."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

POOL_SUMMARY = Path(__file__).with_name("pool_summary.schema.json")
LOAD_REPORT = Path(__file__).with_name("load_report.schema.json")


@cache
def _read(path: Path) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(path.read_text())
    return schema


def pool_summary_schema() -> dict[str, Any]:
    return _read(POOL_SUMMARY)


def load_report_schema() -> dict[str, Any]:
    return _read(LOAD_REPORT)
