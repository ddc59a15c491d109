"""The pool summary's JSON Schema, the typed client's dataclasses and the load report's
JSON Schema, rendered from `fields.py`, so that a new field is one entry there, never a
hand edit of any of them.

A test fails when the committed copies drift from what this writes:

    python -m poolscope.bridge.render --write \\
        bridge/schema/pool_summary.schema.json scheduler_bridge/client_fields.py \\
        bridge/schema/load_report.schema.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from poolscope.bridge.summary import SCHEMA_VERSION, UNKNOWN_SOURCE
from poolscope.contract.fields import (
    DATA_QUALITY_PATH,
    FIELDS,
    GPU_FIELDS,
    GPU_MODEL_LABEL,
    GPUS_SECTION,
    MEMBERSHIP_SOURCES,
    METRIC_SOURCE_FIELDS,
    QUALITY_GROUPS,
    QUALITY_LEVELS,
    SECTIONS,
    Field,
    Kind,
)
from poolscope.exporters.proxy.report import REPORT_PATHS

COMMAND = "python -m poolscope.bridge.render --write"
MISSING = QUALITY_LEVELS[-1]
# data_quality is computed by the bridge, so it is in no table but in its section.
_DQ_SECTION, _, _DQ_KEY = DATA_QUALITY_PATH.partition(".")
_QUALITY_REF = {"$ref": "#/$defs/quality"}
_JSON_TYPE = {Kind.NUMBER: "number", Kind.COUNT: "integer", Kind.STATE: "string"}
_PY_TYPE = {Kind.NUMBER: "float", Kind.COUNT: "int", Kind.STATE: "str"}
GPUS_DESCRIPTION = (
    f"GPU capacity by {GPU_MODEL_LABEL} label value. null: no GPU series names the pool "
    "(no GPU, or GPUs not read: the rollups cannot tell which), never {}. Unhealthy GPUs "
    "are counted apart, neither used nor free.")


def _section_fields(fields: Iterable[Field] = FIELDS) -> dict[str, list[Field]]:
    """The summary's sections in order, each with its fields in table order."""
    by_section: dict[str, list[Field]] = {s: [] for s in SECTIONS}
    for f in fields:
        by_section[f.section].append(f)
    return by_section


# --- the JSON Schema --------------------------------------------------------------

def _value_schema(f: Field, minimum: bool) -> dict[str, Any]:
    """Null or a value of the field's kind: null is "not measured", never a zero."""
    schema: dict[str, Any] = {"type": [_JSON_TYPE[f.kind], "null"]}
    if minimum:
        schema["minimum"] = 0
    schema["description"] = f"{f.lower_layer}. null when {f.null_when}."
    return schema


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    """An object requiring every key it defines (fields are added, never dropped)."""
    return {"type": "object", "required": list(properties), "properties": properties}


def _metric_source(key: str, path: str) -> dict[str, Any]:
    label = f"the source label of the {path} rollup"
    said = (f"Where the pool's membership comes from ({label}): one of "
            f"{', '.join(MEMBERSHIP_SOURCES)}, or {UNKNOWN_SOURCE}." if key == "instances"
            else f"{label.capitalize()}, or {UNKNOWN_SOURCE}.")
    return {"type": "string", "minLength": 1, "description": said}


def _document(name: str, title: str, description: str, generated_at: str,
              properties: dict[str, Any]) -> dict[str, Any]:
    """A schema_version 1 document of one pool: its identity, then `properties`."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://poolscope.invalid/schema/{name}/{SCHEMA_VERSION}",
        "title": f"Poolscope {title}, schema_version {SCHEMA_VERSION}",
        "description": f"{description} Fields are only ever added: consumers must "
                       "tolerate unknown ones.",
        **_object({
            "schema_version": {"const": SCHEMA_VERSION},
            "proxy_id": {"type": "string", "minLength": 1,
                         "description": "The Proxy's proxy_id label."},
            "generated_at": {"type": "number", "description": generated_at},
            **properties,
        }),
    }


def schema(fields: Sequence[Field] = FIELDS,
           gpu_fields: Sequence[Field] = GPU_FIELDS) -> dict[str, Any]:
    """The schema of one pool summary as the bridges serve it."""
    sections = {
        section: _object({
            **{f.key: _value_schema(f, minimum=f.kind is Kind.COUNT) for f in members},
            **({_DQ_KEY: _QUALITY_REF} if section == _DQ_SECTION else {}),
        })
        for section, members in _section_fields(fields).items()
    }
    # Capacity, counted or in bytes, is never negative.
    gpus = {"type": ["object", "null"], "description": GPUS_DESCRIPTION,
            "propertyNames": {"minLength": 1},
            "additionalProperties": _object({f.key: _value_schema(f, minimum=True)
                                             for f in gpu_fields})}
    return {**_document(
        "pool_summary", "pool summary",
        "One Proxy pool as the Scheduler sees it. null: not measured (the reason is in "
        "/debug/pool_resource_sources); 0: a measured zero.",
        "The instant every field was queried at, by the bridge's clock, unix seconds (the "
        "rules wrote the values at or before it).", {
            "metric_source": _object({k: _metric_source(k, p)
                                      for k, p in METRIC_SOURCE_FIELDS.items()}),
            "metric_quality": _object(dict.fromkeys(QUALITY_GROUPS, _QUALITY_REF)),
            **sections,
            GPUS_SECTION: gpus,
        }), "$defs": {"quality": {"enum": list(QUALITY_LEVELS)}}}


def _json(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def render_schema(fields: Sequence[Field] = FIELDS,
                  gpu_fields: Sequence[Field] = GPU_FIELDS) -> str:
    return _json(schema(fields, gpu_fields))


# --- the load report's JSON Schema ------------------------------------------------

# Never null in a report: a Proxy always counts what it holds in flight, and a receiver
# anchors the report's age on when it did.
_REPORT_MEASURED = ("load.inflight_total", "load.inflight_sampled_at")
_REPORT_DESCRIPTION = (
    "A Proxy's load report (poolscope.exporters.proxy.report): the pool summary's fields "
    "that the Proxy measures itself, read on demand for its heartbeats to the Scheduler. "
    "null: not measured; 0: a measured zero. The Proxy reads every field at generated_at, "
    "by its own clock, and the report should be delivered within seconds; a receiver "
    "anchors the report's age on its own receive time, less generated_at - "
    "load.inflight_sampled_at, never on generated_at against its own clock "
    "(poolscope.scheduler_bridge.load_report). load.capacity leaves out the members "
    "whose engine is asleep, as the summary's does.")


def _report_value(f: Field) -> dict[str, Any]:
    """The summary's schema of the field; every number the report carries is a count, a
    capacity or a time, never negative."""
    value = _value_schema(f, minimum=f.kind is not Kind.STATE)
    if f.path in _REPORT_MEASURED:
        value["type"] = _JSON_TYPE[f.kind]
    return value


def report_schema(fields: Sequence[Field] = FIELDS) -> dict[str, Any]:
    """The schema of one load report: the summary's entries of REPORT_PATHS."""
    carried = [f for f in fields if f.path in REPORT_PATHS]
    unknown = set(REPORT_PATHS) - {f.path for f in carried}
    if unknown:
        raise ValueError(f"the load report carries fields the summary has not: {unknown}")
    return _document(
        "load_report", "load report", _REPORT_DESCRIPTION,
        "When the Proxy read every field, unix seconds by its own clock.",
        {section: _object({f.key: _report_value(f) for f in members})
         for section, members in _section_fields(carried).items() if members})


def render_report_schema(fields: Sequence[Field] = FIELDS) -> str:
    return _json(report_schema(fields))


# --- the typed client's dataclasses -----------------------------------------------

def _class_name(section: str) -> str:
    return "".join(word.capitalize() for word in section.split("_"))


def _dataclass(name: str, doc: str, attributes: Iterable[str]) -> str:
    body = "\n".join(f"    {a}" for a in attributes)
    return f'@dataclass(frozen=True)\nclass {name}:\n    """{doc}"""\n\n{body}\n'


def _nullable(f: Field) -> str:
    return f"{f.key}: {_PY_TYPE[f.kind]} | None = None"


def render_client(fields: Sequence[Field] = FIELDS,
                  gpu_fields: Sequence[Field] = GPU_FIELDS) -> str:
    """scheduler_bridge/client_fields.py: one frozen dataclass per summary object."""
    classes = [
        _dataclass("MetricSource", "Where each group of values comes from; "
                   f"{UNKNOWN_SOURCE} when no rollup names it.",
                   (f"{k}: str = UNKNOWN" for k in METRIC_SOURCE_FIELDS)),
        _dataclass("MetricQuality", "How completely each group of fields is measured.",
                   (f"{g}: str = MISSING" for g in QUALITY_GROUPS)),
        *(_dataclass(_class_name(section),
                     f"The `{section}` object; None: not measured, never a zero.",
                     [*map(_nullable, members),
                      *([f"{_DQ_KEY}: str = MISSING"] if section == _DQ_SECTION else [])])
          for section, members in _section_fields(fields).items()),
        _dataclass("GpuCapacity", "One GPU model of a pool; unhealthy GPUs are neither used "
                   "nor free capacity.", map(_nullable, gpu_fields)),
    ]
    header = (f'"""The pool summary\'s objects as the typed client parses them. Rendered from\n'
              f'contract/fields.py by `make generate` ({COMMAND}):\n'
              'edit fields.py, not this file."""\n\n'
              "from __future__ import annotations\n\n"
              "from dataclasses import dataclass\n\n"
              f'UNKNOWN = "{UNKNOWN_SOURCE}"\nMISSING = "{MISSING}"\n')
    return "\n\n".join([header, *classes])


RENDERERS: dict[str, Callable[[], str]] = {
    "pool_summary.schema.json": render_schema,
    "client_fields.py": render_client,
    "load_report.schema.json": render_report_schema,
}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Render the summary's JSON Schema, the typed "
                                "client's dataclasses and the load report's JSON Schema "
                                "from contract/fields.py.")
    p.add_argument("--write", type=Path, nargs="+", required=True,
                   help=f"the files to write, known by name: {', '.join(RENDERERS)}")
    paths: list[Path] = p.parse_args(argv).write
    unknown = [str(path) for path in paths if path.name not in RENDERERS]
    if unknown:
        p.error(f"--write: no renderer for {', '.join(unknown)}")
    for path in paths:
        path.write_text(RENDERERS[path.name]())
    return 0


if __name__ == "__main__":
    sys.exit(main())
