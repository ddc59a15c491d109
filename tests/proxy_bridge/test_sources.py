"""`/debug/pool_resource_sources`: every field's provenance, and for each null field the
cause the running system shows."""

from __future__ import annotations

from typing import Any

import pytest

from harness.canned_prometheus import pool_series, series
from poolscope.bridge.local_queries import LocalSamples
from poolscope.bridge.local_view import LocalView
from poolscope.contract import catalog as c
from poolscope.contract.fields import DATA_QUALITY_PATH, FIELDS
from poolscope.contract.thresholds import FRESH_S
from poolscope.proxy_bridge.diagnosis import CHECKS, PROXY_SIDE
from poolscope.proxy_bridge.diagnosis_instance import gpu
from poolscope.proxy_bridge.diagnosis_reason import Code
from tests.proxy_bridge.conftest import PID, MakeBridge
from tests.proxy_bridge.pool_data import CannedPool, Inst, raw_series
from tests.support.rules import fresh_threshold_s

SOURCES = "/debug/pool_resource_sources"
ROLLUP = {f.path: f.rollup for f in FIELDS}
GPU_AVG = next(f for f in FIELDS if f.path == "utilization.gpu_util_avg")


def _rollups_without(*paths: str) -> list:
    """Complete rollups except the rollups of `paths` (which are then null)."""
    dropped = {ROLLUP[p] for p in paths}
    return [s for s in pool_series(PID, value="1") if s[0]["__name__"] not in dropped]


async def _sources(canned: CannedPool, make_bridge: MakeBridge, instances: list[Inst],
                   null: tuple[str, ...], **raw: Any) -> dict[str, dict[str, Any]]:
    canned.vector = [*_rollups_without(*null), *raw_series(PID, instances, **raw)]
    canned.set_local(PID, instances)
    doc = await (await make_bridge(canned.url)).get(SOURCES)
    assert doc["proxy_id"] == PID and doc["diagnosis_error"] is None
    return {f["path"]: f for f in doc["fields"]}


CASES = [
    pytest.param([Inst("i-1", exporter_up=False), Inst("i-2", exporter_up=False)], {},
                 ("utilization.cpu_avg", "health.resource_freshness_s_max"),
                 "instance_exporter_down", "Instance exporter is down", ["i-1", "i-2"],
                 id="instance-exporters-down"),
    pytest.param([Inst("i-1", engine="tgi")], {},
                 ("utilization.kv_cache_usage_avg", "utilization.kv_cache_usage_max"),
                 "engine_not_exposing", "engine:tgi", ["i-1"], id="engine-not-exposing"),
    pytest.param([Inst("i-1", engine="down", recent_errors={("engine", "connection"): 4})], {},
                 ("load.engine_running_total", "utilization.kv_cache_usage_avg"),
                 "engine_unreachable", "connection", ["i-1"], id="engine-unreachable"),
    pytest.param([Inst("i-1", engine=None)], {}, ("load.engine_waiting_total",),
                 "engine_not_configured", "--engine-metrics-url", ["i-1"],
                 id="engine-not-configured"),
    pytest.param([Inst("i-1", gpus=0), Inst("i-2", gpus=0)], {},
                 ("utilization.gpu_util_avg", "utilization.gpu_mem_used_ratio"),
                 "no_gpu", "no GPU", ["i-1", "i-2"], id="no-gpu"),
    pytest.param([Inst("i-1", gpus=None)], {}, ("utilization.gpu_util_max",),
                 "nvml_unavailable", "NVML", ["i-1"], id="nvml-unavailable"),
    # A CPU-only host: no GPU data, neither failing nor 0.
    pytest.param([Inst("i-1", no_driver="no_nvml_library")], {},
                 ("utilization.gpu_util_avg", "utilization.gpu_util_max",
                  "utilization.gpu_mem_used_ratio"),
                 "no_gpu", "no GPU data", ["i-1"], id="no-driver"),
    pytest.param([Inst("i-1")], {"queue_capacity": None}, ("load.queue_pressure",),
                 "not_wired", "no queue has a configured capacity", [], id="no-queue-capacity"),
    pytest.param([Inst("i-1", proxy_capacity=None)], {}, ("load.capacity", "load.load_ratio"),
                 "not_wired", "no capacity configured", ["i-1"], id="no-capacity"),
    pytest.param([Inst("i-1", alive=False)], {}, ("load.engine_running_total",),
                 "no_alive_instances", "heartbeat", [], id="no-alive-instance"),
    pytest.param([Inst("i-1")], {}, ("load.qps_1m_total",),
                 "no_traffic", "two samples", [], id="qps-warming-up"),
    pytest.param([Inst("i-1")], {}, ("utilization.cpu_avg",),
                 "rollup_absent", "proxy_pool:cpu_utilization:avg", [], id="rule-missing"),
]


@pytest.mark.parametrize(("instances", "raw", "null", "code", "text", "hit"), CASES)
async def test_null_fields_name_their_cause(canned: CannedPool, make_bridge: MakeBridge,
                                            instances: list[Inst], raw: dict[str, Any],
                                            null: tuple[str, ...], code: str, text: str,
                                            hit: list[str]) -> None:
    fields = await _sources(canned, make_bridge, instances, null, **raw)
    for path in null:
        entry = fields[path]
        assert entry["value"] is None and entry["wired"] is False, path
        assert [r["code"] for r in entry["null_reasons"]] == [code], (path, entry)
        assert entry["null_reasons"][0]["instances"] == hit
        assert text in entry["null_reason"], entry["null_reason"]
    for path, entry in fields.items():
        if path not in null:
            assert entry["null_reason"] is None and entry["null_reasons"] == [], path
            assert entry["value"] is not None and entry["wired"] is True, path


async def test_proxy_exporter_down_explains_the_proxy_side_fields_only(
        canned: CannedPool, make_bridge: MakeBridge) -> None:
    canned.vector = raw_series(PID, [Inst("i-1")], proxy_up=False)
    canned.set_local(PID, [])
    bridge = await make_bridge(canned.url)
    doc = await bridge.get(SOURCES)
    assert doc["pool_known"] is False
    assert doc["fields"][-1]["path"] == DATA_QUALITY_PATH
    blamed = {e["path"] for e in doc["fields"]
              if [r["code"] for r in e["null_reasons"]] == ["proxy_exporter_down"]}
    # What only a Proxy-side exporter measures is explained by its absence; what the
    # Instance exporters measure (their series are all here) is not.
    assert blamed == {*PROXY_SIDE, DATA_QUALITY_PATH}
    for entry in doc["fields"]:
        if entry["path"] in blamed:
            assert "poolscope_proxy_collector_success" in entry["null_reason"]
            assert "poolscope-proxy/127.0.0.1:9" in entry["null_reason"]  # the target down
        else:
            assert "proxy_exporter_down" not in str(entry["null_reasons"]), entry


async def test_every_field_has_provenance(canned: CannedPool, make_bridge: MakeBridge) -> None:
    fields = await _sources(canned, make_bridge, [Inst("i-1")], ())
    assert list(fields) == [*(f.path for f in FIELDS), DATA_QUALITY_PATH]
    for f in FIELDS:
        entry = fields[f.path]
        assert entry["rollup"] == f.rollup
        assert entry["classification"] == str(f.classification)
        assert entry["lower_layer"] == f.lower_layer
        assert entry["measured"] is True
    assert fields["load.inflight_total"]["sources"] == {"test": 1}


def test_every_field_has_a_diagnosis() -> None:
    assert set(CHECKS) == {f.path for f in FIELDS}


def test_stale_diagnosis_uses_the_rules_freshness_threshold() -> None:
    """The bridge explains staleness by the rules' threshold; change one, change both."""
    assert fresh_threshold_s() == FRESH_S


async def test_a_gateway_pool_is_diagnosed_by_what_a_gateway_measures(
        canned: CannedPool, make_bridge: MakeBridge) -> None:
    """GIE's endpoint picker reports ready pods, no per-member liveness and no dispatch
    times; the Instance exporters declaring the pool are the members whose causes
    count (the gateway names its endpoints its own way)."""
    gie = "gateway:gie"
    gateway = [series(c.PROXY_COLLECTOR_SUCCESS.name, PID, "1", "exporter",
                      collector="gateway"),
               series(c.POOL_INSTANCES_REGISTERED.name, PID, "2", gie),
               series(c.POOL_INSTANCES_ALIVE.name, PID, "2", gie),
               series(c.PROXY_INSTANCE_REGISTERED.name, PID, "1", gie,
                      instance_id="pod-a-rank-0")]
    exporters = [s for s in raw_series(PID, [Inst("i-1", engine="down")], proxy_up=False)
                 if s[0]["__name__"] != "up" or s[0].get("job") != "poolscope-proxy"]
    null = ("instances.stale", "instances.idle", "load.engine_running_total")
    canned.vector = [*_rollups_without(*null), *gateway, *exporters]
    canned.set_local(PID, [])
    doc = await (await make_bridge(canned.url)).get(SOURCES)
    fields = {f["path"]: f for f in doc["fields"]}
    assert [r["code"] for r in fields["instances.stale"]["null_reasons"]] == ["not_wired"]
    assert "no per-member liveness" in fields["instances.stale"]["null_reason"]
    assert [r["code"] for r in fields["instances.idle"]["null_reasons"]] == ["not_wired"]
    assert "dispatch path" in fields["instances.idle"]["null_reason"]
    [engine] = fields["load.engine_running_total"]["null_reasons"]
    assert (engine["code"], engine["instances"]) == ("engine_unreachable", ["i-1"])


@pytest.mark.parametrize("reason", ["no_nvml_library", "driver_not_loaded"])
def test_a_driverless_host_is_diagnosed_by_its_unavailable_reason(reason: str) -> None:
    """Where the view holds the gpu collector's info series, the cause names its reason
    and is not a failure."""
    raw = [(m, float(v)) for m, v in raw_series(PID, [Inst("i-1", no_driver=reason)])]
    view = LocalView.of(PID, LocalSamples(1_700_000_000.0, raw, [], []))
    [found] = gpu(view, GPU_AVG)
    assert (found.code, found.instances) == (Code.NO_GPU, ("i-1",))
    assert f"reason={reason}" in found.detail and "neither failing nor idle" in found.detail
