"""The committed dashboards against Grafana's own dashboard schema, as the
grafana-foundation-sdk generates it for one Grafana release (pyproject.toml
names which).

The SDK ships no JSON Schema files: it ships model classes generated from the
CUE schemas, with `from_json`/`to_json`. A key the schema does not know is
dropped on the way in, so a round trip that loses a key or changes a value
means the dashboard says something Grafana's schema does not; the models'
type hints then say what type each known key must have, and the SDK's
builders hold the range checks (a panel 0 rows high or 25 columns wide).
"""

from __future__ import annotations

import copy
import enum
import json
import types
import typing
from collections.abc import Iterator
from typing import Any

import pytest
from grafana_foundation_sdk.builders.dashboard import Panel as PanelBuilder
from grafana_foundation_sdk.cog import variants
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models.dashboard import Dashboard

from tests.dashboards.panels import DASHBOARD_FILES, load, panels

# The export envelope Grafana's "Export for sharing externally" adds around
# the dashboard model; the schema models the dashboard only.
EXPORT_KEYS = frozenset({"__inputs", "__elements", "__requires"})

register_default_plugins()


def _lost(given: Any, kept: Any, path: str) -> Iterator[str]:
    """Keys of `given` that the round trip dropped or changed. Keys the SDK
    adds are its defaults, and a null is the same as an absent key."""
    if isinstance(given, dict) and isinstance(kept, dict):
        for key, value in given.items():
            if key not in kept:
                if value is not None:
                    yield f"{path}.{key}: not in Grafana's schema"
            else:
                yield from _lost(value, kept[key], f"{path}.{key}")
    elif isinstance(given, list) and isinstance(kept, list) and len(given) == len(kept):
        for i, (a, b) in enumerate(zip(given, kept, strict=True)):
            yield from _lost(a, b, f"{path}[{i}]")
    elif given != kept or type(given) is not type(kept):
        yield f"{path}: {given!r} became {kept!r}"


def _is_model(cls: Any) -> bool:
    return isinstance(cls, type) and callable(getattr(cls, "from_json", None))


def _mistyped(value: Any, hint: Any, path: str) -> list[str]:
    """Where `value` does not have the type the SDK's model declares."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or hint is object:
        return _fields(value, path) if hasattr(value, "to_json") else []
    if origin in (typing.Union, types.UnionType):
        tries = [_mistyped(value, arg, path) for arg in args]
        return [] if any(not t for t in tries) else min(tries, key=len)
    if hint is type(None):
        return [] if value is None else [f"{path}: {value!r} is not null"]
    if origin is typing.Literal:
        return [] if value in args else [f"{path}: {value!r} is not one of {args}"]
    if origin is list:
        if not isinstance(value, list):
            return [f"{path}: {value!r} is not a list"]
        return [p for i, item in enumerate(value) for p in _mistyped(item, args[0], f"{path}[{i}]")]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{path}: {value!r} is not an object"]
        return [p for k, v in value.items() for p in _mistyped(v, args[1], f"{path}.{k}")]
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return [] if value in {m.value for m in hint} else [
            f"{path}: {value!r} is not one of {[m.value for m in hint]}"]
    if hint is bool:
        return [] if isinstance(value, bool) else [f"{path}: {value!r} is not a boolean"]
    if hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return [] if ok else [f"{path}: {value!r} is not an integer"]
    if hint is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return [] if ok else [f"{path}: {value!r} is not a number"]
    if hint is str:
        return [] if isinstance(value, str) else [f"{path}: {value!r} is not a string"]
    if hint is variants.Dataquery:
        return _fields(value, path)
    if _is_model(hint):
        if isinstance(value, dict):  # some fields are decoded lazily, as plain JSON
            value = hint.from_json(value)
        if not isinstance(value, hint):
            return [f"{path}: {value!r} is not a {hint.__name__}"]
        return _fields(value, path)
    raise AssertionError(f"{path}: no check for the SDK type {hint!r}")


def _fields(model: Any, path: str) -> list[str]:
    hints = typing.get_type_hints(type(model))
    return [p for name, hint in hints.items()
            for p in _mistyped(getattr(model, name), hint, f"{path}.{name}")]


def _grid(dashboard: dict[str, Any]) -> list[str]:
    found = []
    for panel in panels(dashboard):
        g = panel["gridPos"]
        if not all(isinstance(g.get(k), int) for k in "hw"):
            continue  # a missing or mistyped size is the type check's to report
        try:
            PanelBuilder().height(g["h"]).span(g["w"])
        except ValueError as e:
            found.append(f"{panel['title']}: gridPos {g}: {e}")
    return found


def schema_problems(dashboard: dict[str, Any]) -> list[str]:
    """Everything in a dashboard that Grafana's dashboard schema does not allow."""
    body = {k: v for k, v in dashboard.items() if k not in EXPORT_KEYS}
    model = Dashboard.from_json(body)
    kept = json.loads(json.dumps(model, cls=JSONEncoder))
    return [*_lost(body, kept, ""), *_fields(model, ""), *_grid(body)]


BY_NAME = {path.stem: path for path in DASHBOARD_FILES}


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_dashboard_is_valid_for_grafanas_schema(name: str) -> None:
    assert schema_problems(load(BY_NAME[name])) == []


def _first(dashboard: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(p for p in panels(dashboard) if p["type"] == kind)


@pytest.mark.parametrize("doctor, says", [
    (lambda d: _first(d, "timeseries")["gridPos"].update(h="8"), "is not an integer"),
    (lambda d: _first(d, "timeseries").update(colour="red"), ".colour: not in Grafana's schema"),
    (lambda d: _first(d, "timeseries")["options"]["legend"].update(placement="left"),
     "is not one of"),
    (lambda d: _first(d, "stat")["gridPos"].update(w=25), "w must be <= 24"),
    (lambda d: _first(d, "stat")["gridPos"].update(h=0), "h must be > 0"),
    (lambda d: d["templating"]["list"][1].update(multi="yes"), "is not a boolean"),
    (lambda d: d.update(refresh=30), "is not a string"),
    (lambda d: d["annotations"]["list"][0].update(builtIn="1"), "is not a number"),
], ids=["type", "unknown-field", "enum", "too-wide", "no-height", "variable", "top-level",
        "annotation"])
def test_schema_check_catches_a_broken_dashboard(doctor: Any, says: str) -> None:
    broken = copy.deepcopy(load(BY_NAME["poolscope-pool"]))
    doctor(broken)
    found = schema_problems(broken)
    assert len(found) == 1 and says in found[0], found
