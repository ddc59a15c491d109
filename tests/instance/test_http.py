"""The HTTP surface: /metrics, /healthz and the Resource Agent's snapshot."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from harness.fake_gpus import NVML_ERROR_LIBRARY_NOT_FOUND, FakeNvml
from poolscope.contract import catalog
from poolscope.exporters.instance.server import make_app
from tests.instance.conftest import EngineServer, MakeExporter, fixture_text

NUM_OR_NULL = {"type": ["number", "null"]}
SNAPSHOT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["schema_version", "agent_version", "instance_id", "timestamp_ms", "devices",
                 "capacity_hint"],
    "properties": {
        "schema_version": {"const": "resource_snapshot_v1"},
        "agent_version": {"type": "string", "minLength": 1},
        "instance_id": {"const": "inst-1"},
        "timestamp_ms": {"type": ["integer", "null"]},
        "devices": {
            "type": "object", "required": ["cpu", "memory", "network"],
            "properties": {
                "cpu": {"type": "object", "required": ["utilization_percent", "logical_count"]},
                "memory": {"type": "object", "properties": {
                    k: NUM_OR_NULL for k in ("total_bytes", "used_bytes", "available_bytes",
                                             "used_ratio")}},
                "network": {"type": "object", "required": ["interfaces", "rx_mbps", "tx_mbps"]},
                "gpu": {"type": ["array", "null"], "items": {
                    "type": "object",
                    "required": ["index", "uuid", "model", "healthy", "utilization_percent",
                                 "memory_used_bytes", "memory_total_bytes"]}},
            },
        },
        "capacity_hint": {
            "type": "object", "required": ["memory_free_ratio", "admission_state"],
            "properties": {"memory_free_ratio": NUM_OR_NULL,
                           "admission_state": {"enum": list(catalog.ADMISSION_STATES)}},
        },
    },
}


async def client_for(exporter: Any) -> TestClient:  # type: ignore[type-arg]
    client = TestClient(TestServer(make_app(exporter)))
    await client.start_server()
    return client


async def get_json(exporter: Any, path: str) -> Any:
    client = await client_for(exporter)
    try:
        return await (await client.get(path)).json()
    finally:
        await client.close()


async def test_snapshot_before_the_first_sample_is_all_null(make_exporter: MakeExporter) -> None:
    exporter, _ = make_exporter()
    body = await get_json(exporter, "/v1/resource/snapshot")
    jsonschema.validate(body, SNAPSHOT_SCHEMA)
    assert body["timestamp_ms"] is None
    assert body["devices"]["cpu"] == {"utilization_percent": None, "logical_count": None}
    assert body["devices"]["gpu"] is None
    assert body["capacity_hint"] == {"memory_free_ratio": None, "admission_state": "unknown",
                                     "capacity_requests": None, "capacity_source": None}


async def test_snapshot_with_gpus_and_engine(engine_server: EngineServer,
                                             make_exporter: MakeExporter) -> None:
    engine_server.body = fixture_text("sglang")
    exporter, _ = make_exporter(engine_metrics_url=engine_server.url)
    await exporter.loop.sample_all()
    body = await get_json(exporter, "/v1/resource/snapshot")
    jsonschema.validate(body, SNAPSHOT_SCHEMA)
    assert isinstance(body["timestamp_ms"], int)
    assert body["devices"]["memory"]["total_bytes"] > 0
    assert [g["uuid"] for g in body["devices"]["gpu"]] == ["GPU-aaaa", "GPU-bbbb", "GPU-cccc"]
    assert body["devices"]["gpu"][1]["utilization_percent"] == pytest.approx(55)
    assert body["devices"]["gpu"][2]["power_watts"] is None
    assert body["engine"]["name"] == "sglang" and body["engine"]["requests_running"] == 312
    assert body["capacity_hint"]["admission_state"] == "saturated"
    assert body["capacity_hint"]["capacity_source"] == "learned"


async def test_snapshot_gpu_is_null_without_nvml(make_exporter: MakeExporter) -> None:
    exporter, _ = make_exporter(nvml=FakeNvml([], init_error=NVML_ERROR_LIBRARY_NOT_FOUND))
    await exporter.loop.sample_all()
    body = await get_json(exporter, "/v1/resource/snapshot")
    assert body["devices"]["gpu"] is None
    assert body["collectors"]["gpu"] == {"success": None, "sample_age_s": None,
                                         "last_error": None, "unavailable": "no_nvml_library"}
    assert body["collectors"]["host"]["success"] is True
    assert body["collectors"]["host"]["unavailable"] is None


async def test_snapshot_leaves_out_a_collector_switched_off(make_exporter: MakeExporter) -> None:
    exporter, _ = make_exporter(gpu_collector=False, host_collector=False)
    await exporter.loop.sample_all()
    body = await get_json(exporter, "/v1/resource/snapshot")
    jsonschema.validate(body, SNAPSHOT_SCHEMA)
    assert body["collectors"] == {}
    assert body["devices"]["gpu"] is None and body["timestamp_ms"] is None
    assert body["devices"]["memory"]["total_bytes"] is None


async def test_healthz(make_exporter: MakeExporter) -> None:
    exporter, _ = make_exporter()
    assert (await get_json(exporter, "/healthz"))["status"] == "ok"


async def test_metrics_exposition_labels_every_series_with_identity_and_source(
        engine_server: EngineServer, make_exporter: MakeExporter) -> None:
    engine_server.body = fixture_text("vllm")
    exporter, _ = make_exporter(engine_metrics_url=engine_server.url)
    await exporter.loop.sample_all()
    client = await client_for(exporter)
    try:
        resp = await client.get("/metrics")
        text = await resp.text()
    finally:
        await client.close()
    assert resp.headers["Content-Type"].startswith("text/plain")
    families = list(text_string_to_metric_families(text))
    declared = {f.name.removesuffix("_total"): f for f in catalog.all_families()}
    assert len(families) >= 20
    # Exactly two kinds of series describe the exporter process, not the Instance,
    # and so carry neither identity nor `source`, as every exporter publishes them.
    process_own = [f for f in families
                   if f.name.startswith("process_") or f.name == "poolscope_build_info"]
    assert {f.name for f in process_own} >= {"process_cpu_seconds", "poolscope_build_info"}
    assert not [s for f in process_own for s in f.samples
                if {"proxy_id", "instance_id", "source"} & s.labels.keys()]
    for family in families:
        if family in process_own:
            continue
        assert family.name in declared, family.name  # only catalog names
        for sample in family.samples:
            assert {"proxy_id", "instance_id", "source"} <= sample.labels.keys()
            assert set(sample.labels) == set(declared[family.name].labels), sample
