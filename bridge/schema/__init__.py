"""The pool summary's JSON Schema, shipped with the package for consumers and tests;
rendered from bridge/fields.py by poolscope.bridge.contract."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

POOL_SUMMARY = Path(__file__).with_name("pool_summary.schema.json")


@cache
def pool_summary_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(POOL_SUMMARY.read_text())
    return schema
