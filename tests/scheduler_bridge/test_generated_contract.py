"""The JSON Schemas and the client's dataclasses are rendered from fields.py, and a new
field needs nothing but its entry there (plus its rule and its test): the schemas, the
client and the Proxy bridge's diagnosis all follow from it."""

from __future__ import annotations

import dataclasses
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from jsonschema import Draft202012Validator, ValidationError

from harness.canned_prometheus import Series, pool_series
from poolscope.bridge import render
from poolscope.bridge.local_view import LocalView
from poolscope.bridge.pool_series import PoolSeries
from poolscope.bridge.schema import LOAD_REPORT, POOL_SUMMARY, load_report_schema
from poolscope.bridge.summary import build_summaries, parse_value
from poolscope.contract import catalog as c
from poolscope.contract import fields
from poolscope.contract.fields import Classification, Field, Input, Kind
from poolscope.exporters.proxy import ProxyExporter
from poolscope.exporters.proxy.report import REPORT_PATHS
from poolscope.proxy_bridge import diagnosis
from poolscope.proxy_bridge.diagnosis_reason import Code
from poolscope.scheduler_bridge import client
from tests.proxy_bridge.pool_data import Inst, raw_series

CLIENT_FIELDS = Path(client.__file__).with_name("client_fields.py")
PID = "p"

# Two fields a later version might add: a number the engines measure, and a count only
# the Proxy side knows.
PREEMPTED = Field("load.engine_preempted_total", "proxy_pool:engine_preempted:sum",
                  Classification.MEASURED,
                  "poolscope_engine_requests_preempted (instance exporter, engine /metrics)",
                  "no engine of the pool can be read", group="load", inputs=(Input.ENGINE,))
DRAINING = Field("instances.draining", "proxy_pool:instances_draining:count",
                 Classification.MEASURED, "poolscope_proxy_pool_instances_draining",
                 "no Proxy-side exporter reports the pool", Kind.COUNT, proxy_side=True)


def test_the_committed_schema_is_rendered_from_fields_py() -> None:
    assert POOL_SUMMARY.read_text() == render.render_schema(), (
        f"{POOL_SUMMARY} drifted from fields.py: run `make generate`")


def test_the_committed_client_fields_are_rendered_from_fields_py() -> None:
    assert CLIENT_FIELDS.read_text() == render.render_client(), (
        f"{CLIENT_FIELDS} drifted from fields.py: run `make generate`")


def test_the_committed_load_report_schema_is_rendered_from_fields_py() -> None:
    assert LOAD_REPORT.read_text() == render.render_report_schema(), (
        f"{LOAD_REPORT} drifted from fields.py: run `make generate`")


def _exporter(*, everything: bool) -> ProxyExporter:
    """A Proxy that measures every field of its report, or one that knows least."""
    exporter = ProxyExporter(PID)
    exporter.instances.register("i-1", "http://i-1", capacity=4 if everything else None)
    if everything:
        exporter.instances.set_admission_state("i-1", "accepting")
        for queue in c.QUEUES:
            exporter.add_queue(queue, lambda: 0)
    return exporter


@pytest.mark.parametrize("everything", [True, False])
def test_a_real_load_report_is_valid_and_of_exactly_the_schemas_fields(
        everything: bool) -> None:
    """What the collector can emit is what the schema declares, null where unmeasured."""
    schema = load_report_schema()
    Draft202012Validator.check_schema(schema)
    report = _exporter(everything=everything).load_report()
    Draft202012Validator(schema).validate(report)
    declared = {f"{s}.{k}" for s, props in schema["properties"].items()
                for k in props.get("properties", ())}
    emitted = {f"{s}.{k}": v for s in ("load", "health") for k, v in report[s].items()}
    assert set(emitted) == declared == set(REPORT_PATHS)
    assert (None not in emitted.values()) is everything


def test_the_load_reports_fields_have_the_summarys_schemas() -> None:
    """Taken from the same entries: a field's type and meaning are the summary's."""
    summary, report = render.schema(), render.report_schema()
    for path in REPORT_PATHS:
        section, _, key = path.partition(".")
        ours = report["properties"][section]["properties"][key]
        theirs = summary["properties"][section]["properties"][key]
        assert ours["description"] == theirs["description"], path
        assert set(_types(ours)) <= set(_types(theirs)), path


def _types(field_schema: dict[str, Any]) -> list[str]:
    kind = field_schema["type"]
    return kind if isinstance(kind, list) else [kind]


def test_every_input_a_field_can_name_has_a_diagnosis() -> None:
    assert set(diagnosis.INPUT_CHECKS) == set(Input)


@pytest.fixture
def with_new_fields(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """FIELDS with the two new entries, and the modules that read it loaded anew."""
    monkeypatch.setattr(fields, "FIELDS", (*fields.FIELDS, PREEMPTED, DRAINING))
    importlib.reload(render)
    importlib.reload(diagnosis)
    yield
    monkeypatch.undo()
    importlib.reload(render)
    importlib.reload(diagnosis)


def _summary(**added: Any) -> dict[str, Any]:
    """A valid summary of today's fields, with `added` ("section.key": value) set."""
    pool = build_summaries([(m, parse_value(v)) for m, v in pool_series(PID)], 1.0)[PID]
    for path, value in added.items():
        section, _, key = path.partition(".")
        pool[section][key] = value
    return pool


def _view(raw: list[Series]) -> LocalView:
    return LocalView(PID, 1.0, PoolSeries.index((m, parse_value(v)) for m, v in raw), (), ())


@pytest.mark.parametrize(("preempted", "draining", "valid"), [
    (2.5, 3, True), (None, None, True), (0, 0, True),
    ("2.5", 3, False), (2.5, 1.5, False), (2.5, -1, False)])
@pytest.mark.usefixtures("with_new_fields")
def test_a_new_field_is_in_the_schema_with_its_kind(preempted: Any, draining: Any,
                                                     valid: bool) -> None:
    """A number or null, a count (a whole number, at least 0) or null."""
    validator = Draft202012Validator(render.schema())
    pool = _summary(**{PREEMPTED.path: preempted, DRAINING.path: draining})
    assert validator.is_valid(pool) is valid


@pytest.mark.usefixtures("with_new_fields")
def test_a_new_field_is_required_by_the_schema() -> None:
    with pytest.raises(ValidationError, match=PREEMPTED.key):
        Draft202012Validator(render.schema()).validate(_summary(**{DRAINING.path: 1}))


@pytest.mark.usefixtures("with_new_fields")
def test_a_new_field_is_declared_in_the_client_as_null_or_its_type(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rendered = ModuleType("rendered_client_fields")
    monkeypatch.setitem(sys.modules, rendered.__name__, rendered)  # dataclasses look it up
    exec(compile(render.render_client(), str(CLIENT_FIELDS), "exec"), rendered.__dict__)
    declared = {(cls, f.name): (f.type, f.default) for cls in ("Load", "Instances")
                for f in dataclasses.fields(getattr(rendered, cls))}
    assert declared[("Load", PREEMPTED.key)] == ("float | None", None)
    assert declared[("Instances", DRAINING.key)] == ("int | None", None)


@pytest.mark.usefixtures("with_new_fields")
def test_a_new_field_is_diagnosed_by_the_inputs_its_entry_names() -> None:
    assert {PREEMPTED.path, DRAINING.path} <= set(diagnosis.CHECKS)
    no_engine = _view(raw_series(PID, [Inst("i-1", engine=None)]))
    [reason] = diagnosis.null_reasons(no_engine, PREEMPTED.path)
    assert (reason.code, reason.instances) == (Code.ENGINE_NOT_CONFIGURED, ("i-1",))
    silent_proxy = _view(raw_series(PID, [Inst("i-1")], proxy_up=False))
    [reason] = diagnosis.null_reasons(silent_proxy, DRAINING.path)
    assert reason.code == Code.PROXY_EXPORTER_DOWN
    assert c.PROXY_COLLECTOR_SUCCESS.name in reason.detail
    # Its inputs measured, the field's own rollup is what is missing.
    [reason] = diagnosis.null_reasons(_view(raw_series(PID, [Inst("i-1")])), PREEMPTED.path)
    assert reason.code == Code.ROLLUP_ABSENT and PREEMPTED.rollup in reason.detail
