"""`/debug/pool_resource?detail=local`: per-Instance and per-queue values, and nulls
where nothing was measured."""

from __future__ import annotations

import pytest

from harness.canned_prometheus import pool_series
from tests.proxy_bridge.conftest import PID, MakeBridge
from tests.proxy_bridge.pool_data import (
    PER_INSTANCE,
    CannedPool,
    Inst,
    queue_wait,
    raw_series,
)
from tests.scheduler_bridge.conftest import FakeClock

LOCAL = "/debug/pool_resource?detail=local"


async def _local(canned: CannedPool, make_bridge: MakeBridge, instances: list[Inst],
                 **kw: object) -> dict:
    canned.vector = [*pool_series(PID), *raw_series(PID, instances, **kw)]  # type: ignore[arg-type]
    canned.set_local(PID, instances)
    bridge = await make_bridge(canned.url)
    return await bridge.get(LOCAL)


async def test_instance_values_in_the_schema_units(canned: CannedPool, make_bridge: MakeBridge,
                                                   clock: FakeClock) -> None:
    doc = await _local(canned, make_bridge, [Inst("i-1", gpus=2)])
    assert doc["proxy_id"] == PID and doc["detail"] == "local"
    assert doc["generated_at"] == round(clock.now, 3) and doc["stale"] is False
    (inst,) = doc["instances"]
    assert inst["instance_id"] == "i-1"
    assert inst["registered"] is True and inst["alive"] is True
    assert inst["heartbeat_age_s"] == 1.5
    assert inst["resource_freshness_s"] == 1.25
    assert inst["cpu_percent"] == pytest.approx(42.0)
    assert inst["memory_used_ratio"] == pytest.approx(0.25)
    assert inst["network_rx_mbps"] == pytest.approx(10.0)
    assert inst["network_tx_mbps"] == pytest.approx(2.0)
    assert inst["gpu_devices"] == 2
    assert [g["gpu"] for g in inst["gpus"]] == ["0", "1"]
    assert inst["gpus"][0] == {"gpu": "0", "gpu_uuid": "GPU-i-1-0", "gpu_model": "H100",
                               "healthy": True, "util_percent": pytest.approx(90.0),
                               "memory_used_ratio": pytest.approx(0.25)}
    assert inst["admission_state"] == "accepting"
    assert inst["engine"] == {"source": "engine:vllm", "running": 2, "waiting": 1,
                              "kv_cache_usage_ratio": 0.5}
    assert inst["proxy_inflight"] == 2
    assert inst["capacity"] == {"value": 8, "source": "configured"}
    assert inst["idle"] == "measured" and inst["idle_s"] == 12
    assert inst["idle_since"] == 1699999988
    assert inst["collectors"]["host"] == {"success": True, "reasons": [],
                                          "reasons_over": "lifetime"}


async def test_per_instance_figures_are_read_by_name_whatever_tells_them_apart(
        canned: CannedPool, make_bridge: MakeBridge) -> None:
    # Prometheus answers the per-Instance query with a `figure` label on each figure
    # (an `or` ignores `__name__`): the view reads them by name all the same.
    canned.vector = [*pool_series(PID), *raw_series(PID, [Inst("i-1")])]  # type: ignore[arg-type]
    canned.vector = [({**m, "figure": m["__name__"]} if m["__name__"] in PER_INSTANCE else m, v)
                     for m, v in canned.vector]
    canned.set_local(PID, [Inst("i-1")])
    (inst,) = (await (await make_bridge(canned.url)).get(LOCAL))["instances"]
    assert inst["resource_freshness_s"] == 1.25
    assert inst["network_rx_mbps"] == pytest.approx(10.0)
    assert inst["network_tx_mbps"] == pytest.approx(2.0)


async def test_queues_depth_capacity_age_and_mean_wait(canned: CannedPool,
                                                       make_bridge: MakeBridge) -> None:
    doc = await _local(canned, make_bridge, [Inst("i-1")])
    assert doc["queues"]["prepare"] == {"depth": 3, "capacity": 64, "oldest_age_s": 0.75,
                                        "mean_wait_s_1m": 0.2}
    # Empty queue: no oldest age; no traffic in the last minute: no mean wait (0/0).
    assert doc["queues"]["ready"] == {"depth": 0, "capacity": 64, "oldest_age_s": None,
                                      "mean_wait_s_1m": None}


async def test_never_dispatched_is_unknown_not_idle(canned: CannedPool,
                                                    make_bridge: MakeBridge) -> None:
    doc = await _local(canned, make_bridge, [Inst("i-1", idle_s=None)])
    (inst,) = doc["instances"]
    assert inst["idle"] == "unknown"
    assert inst["idle_s"] is None and inst["idle_since"] is None


async def test_no_gpu_is_an_empty_list_and_null_fields(canned: CannedPool,
                                                       make_bridge: MakeBridge) -> None:
    doc = await _local(canned, make_bridge, [Inst("nvml-less", gpus=None), Inst("zero", gpus=0),
                                             Inst("cpu-only", no_driver="no_nvml_library")])
    by_id = {i["instance_id"]: i for i in doc["instances"]}
    assert by_id["nvml-less"]["gpus"] == [] and by_id["nvml-less"]["gpu_devices"] is None
    assert by_id["nvml-less"]["collectors"]["gpu"] == {
        "success": False, "reasons": ["nvml_unavailable"], "reasons_over": "lifetime"}
    # No driver: no GPU data, and not failing either.
    assert by_id["cpu-only"]["gpus"] == [] and by_id["cpu-only"]["gpu_devices"] is None
    assert by_id["cpu-only"]["collectors"]["gpu"] == {
        "success": None, "reasons": [], "reasons_over": "lifetime"}
    assert by_id["zero"]["gpus"] == [] and by_id["zero"]["gpu_devices"] == 0


async def test_unmeasured_values_are_null_never_zero(canned: CannedPool,
                                                     make_bridge: MakeBridge) -> None:
    doc = await _local(canned, make_bridge, [
        Inst("dark", exporter_up=False, engine=None, proxy_capacity=None, idle_s=None)],
        queue_capacity=None)
    (inst,) = doc["instances"]
    for key in ("cpu_percent", "memory_used_ratio", "network_rx_mbps", "network_tx_mbps",
                "resource_freshness_s", "gpu_devices", "admission_state", "idle_s"):
        assert inst[key] is None, key
    assert inst["engine"] == {"source": None, "running": None, "waiting": None,
                              "kv_cache_usage_ratio": None}
    assert inst["capacity"] == {"value": None, "source": None}
    assert inst["collectors"]["engine"]["success"] is None
    assert inst["proxy_inflight"] == 2  # the Proxy still measures its own side
    assert doc["queues"]["prepare"]["capacity"] is None


async def test_learned_capacity_when_the_proxy_configures_none(
        canned: CannedPool, make_bridge: MakeBridge) -> None:
    doc = await _local(canned, make_bridge, [Inst("i-1", proxy_capacity=None,
                                                  learned_capacity=5)])
    assert doc["instances"][0]["capacity"] == {"value": 5, "source": "learned"}


async def test_an_instance_the_proxy_does_not_register(canned: CannedPool,
                                                       make_bridge: MakeBridge) -> None:
    canned.vector = [*raw_series(PID, [Inst("i-1")]),
                     *(s for s in raw_series(PID, [Inst("rogue")])
                       if s[0].get("instance_id") == "rogue"
                       and not s[0]["__name__"].startswith("poolscope_proxy_"))]
    canned.set_local(PID, [])
    doc = await (await make_bridge(canned.url)).get(LOCAL)
    by_id = {i["instance_id"]: i for i in doc["instances"]}
    assert by_id["rogue"]["registered"] is False
    assert by_id["rogue"]["alive"] is None and by_id["rogue"]["cpu_percent"] is not None


async def test_without_the_proxy_registration_is_unknown(canned: CannedPool,
                                                         make_bridge: MakeBridge) -> None:
    doc = await _local(canned, make_bridge, [Inst("i-1")], proxy_up=False)
    assert doc["proxy"]["reporting"] is False
    assert {t["job"]: t["up"] for t in doc["proxy"]["scrape_targets"]} == {
        "poolscope-instance": True, "poolscope-proxy": False}
    assert doc["instances"][0]["registered"] is None


async def test_a_member_that_stopped_answering_is_listed_as_not_scraped(
        canned: CannedPool, make_bridge: MakeBridge) -> None:
    # No Proxy exporter: the pool's members are whoever declares it, and one whose
    # exporter went silent within the member memory still counts, as stale.
    doc = await _local(canned, make_bridge, [Inst("i-1"), Inst("i-2", exporter_up=False)],
                       proxy_up=False)
    by_id = {i["instance_id"]: i for i in doc["instances"]}
    assert by_id.keys() == {"i-1", "i-2"}
    assert by_id["i-1"]["host_scraped"] is True and by_id["i-2"]["host_scraped"] is False
    assert by_id["i-2"]["cpu_percent"] is None


async def test_few_queries_at_one_time_whatever_the_pool_size(
        canned: CannedPool, make_bridge: MakeBridge) -> None:
    doc = await _local(canned, make_bridge, [Inst(f"i-{k}") for k in range(12)])
    assert len(doc["instances"]) == 12
    assert len(canned.queries) == 6  # the rollups, their timestamps + 4 local queries
    assert len({at for _, at in canned.queries}) == 1


async def test_recent_error_reasons_come_first(canned: CannedPool,
                                               make_bridge: MakeBridge) -> None:
    inst = Inst("i-1", engine="down", recent_errors={("engine", "timeout"): 2})
    doc = await _local(canned, make_bridge, [inst])
    assert doc["instances"][0]["collectors"]["engine"] == {
        "success": False, "reasons": ["timeout"], "reasons_over": "1m"}


@pytest.mark.parametrize("detail", ["", "LOCAL", "global", "local,x"])
async def test_other_detail_values_are_400(canned: CannedPool, make_bridge: MakeBridge,
                                           detail: str) -> None:
    canned.vector = pool_series(PID)
    bridge = await make_bridge(canned.url)
    body = await bridge.get(f"/debug/pool_resource?detail={detail}", status=400)
    assert body["detail"] == detail
    assert canned.queries == []  # refused before anything is asked


async def test_local_query_failure_keeps_the_summary(canned: CannedPool,
                                                     make_bridge: MakeBridge) -> None:
    canned.vector = pool_series(PID)
    canned.set_local(PID, [])
    canned.fail_matching = "increase("
    bridge = await make_bridge(canned.url)
    assert (await bridge.get("/debug/pool_resource"))["proxy_id"] == PID
    body = await bridge.get(LOCAL, status=503)
    assert "canned failure" in body["cause"]
    assert bridge.registry.get_sample_value(
        "poolscope_proxy_bridge_local_views_total", {"outcome": "error"}) == 1


def test_queue_wait_fixture_is_nan_without_traffic() -> None:
    assert queue_wait(PID)[1][1] == "NaN"
