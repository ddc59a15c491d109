"""The schema file and the client's dataclasses agree with fields.py, the contract."""

from __future__ import annotations

import dataclasses

import pytest
from jsonschema import Draft202012Validator, ValidationError

from harness.canned_prometheus import pool_series
from poolscope.bridge.schema import pool_summary_schema
from poolscope.bridge.summary import build_summaries, parse_value
from poolscope.contract.fields import (
    DATA_QUALITY_PATH,
    FIELDS,
    GPU_FIELDS,
    METRIC_SOURCE_FIELDS,
    QUALITY_GROUPS,
    SECTIONS,
)
from poolscope.scheduler_bridge import client

PATHS = [*(f.path for f in FIELDS), DATA_QUALITY_PATH]


def test_schema_requires_every_field() -> None:
    schema = pool_summary_schema()
    Draft202012Validator.check_schema(schema)
    required = {f"{s}.{k}" for s in SECTIONS for k in schema["properties"][s]["required"]}
    assert required == set(PATHS)
    assert schema["properties"]["metric_source"]["required"] == list(METRIC_SOURCE_FIELDS)
    assert schema["properties"]["metric_quality"]["required"] == list(QUALITY_GROUPS)


@pytest.mark.parametrize("path", ["instances.total", "load.inflight_total", "health"])
def test_schema_rejects_a_summary_missing_a_field(path: str) -> None:
    pool = build_summaries([(m, parse_value(v)) for m, v in pool_series("a")], 1.0)["a"]
    Draft202012Validator(pool_summary_schema()).validate(pool)
    section, _, key = path.partition(".")
    if key:
        del pool[section][key]
    else:
        del pool[section]
    with pytest.raises(ValidationError):
        Draft202012Validator(pool_summary_schema()).validate(pool)


def test_client_dataclasses_mirror_the_field_table() -> None:
    sections = {"instances": client.Instances, "load": client.Load,
                "utilization": client.Utilization, "health": client.Health}
    mirrored = [f"{s}.{f.name}" for s, cls in sections.items() for f in dataclasses.fields(cls)]
    assert sorted(mirrored) == sorted(PATHS)
    assert [f.name for f in dataclasses.fields(client.MetricSource)] == list(METRIC_SOURCE_FIELDS)
    assert [f.name for f in dataclasses.fields(client.MetricQuality)] == list(QUALITY_GROUPS)


def test_gpu_capacity_mirrors_the_gpu_field_table() -> None:
    keys = [f.key for f in GPU_FIELDS]
    assert [f.name for f in dataclasses.fields(client.GpuCapacity)] == keys
    entry = pool_summary_schema()["properties"]["gpus"]["additionalProperties"]
    assert list(entry["properties"]) == keys
    parsed = client.parse_pool({"schema_version": 1, "proxy_id": "a", "generated_at": 1.0,
                                "gpus": {"m": dict(zip(keys, (1, 0, 2.0, 0.75), strict=True))}})
    assert parsed.gpus == {"m": client.GpuCapacity(1, 0, 2.0, 0.75)}
    # An older bridge's model entry without `used`: not measured, never 0 busy.
    older = {"healthy": 1, "unhealthy": 0, "memory_total_bytes": 2.0}
    parsed = client.parse_pool({"schema_version": 1, "proxy_id": "a", "generated_at": 1.0,
                                "gpus": {"m": older}})
    assert parsed.gpus == {"m": client.GpuCapacity(1, 0, 2.0, used=None)}
    # An older bridge without the field: unknown, not "no GPU".
    assert client.parse_pool({"schema_version": 1, "proxy_id": "a",
                              "generated_at": 1.0}).gpus is None
