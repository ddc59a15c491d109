"""An asleep engine explains a null capacity (and load ratio), and the pool's local view
gives it no capacity, as the capacity rollup counts it: the Proxy still configures one
for it, but an asleep engine serves nothing until woken."""

from __future__ import annotations

from typing import Any

from harness.canned_prometheus import Series, pool_series
from poolscope.contract.fields import FIELDS
from tests.proxy_bridge.conftest import PID, MakeBridge
from tests.proxy_bridge.pool_data import CannedPool, Inst, raw_series

SOURCES = "/debug/pool_resource_sources"
NULL = ("load.capacity", "load.load_ratio")
ROLLUPS = {f.rollup for f in FIELDS if f.path in NULL}


def _without_capacity() -> list[Series]:
    return [s for s in pool_series(PID, value="1") if s[0]["__name__"] not in ROLLUPS]


async def _sources(canned: CannedPool, make_bridge: MakeBridge,
                   instances: list[Inst]) -> dict[str, dict[str, Any]]:
    canned.vector = [*_without_capacity(), *raw_series(PID, instances)]
    canned.set_local(PID, [])
    doc = await (await make_bridge(canned.url)).get(SOURCES)
    assert doc["diagnosis_error"] is None
    return {f["path"]: f for f in doc["fields"]}


async def test_an_asleep_member_is_why_the_capacity_is_null(
        canned: CannedPool, make_bridge: MakeBridge) -> None:
    # b1 asleep with a configured capacity the rules take away; b2 awake with none.
    fields = await _sources(canned, make_bridge, [
        Inst("b1", admission="asleep"), Inst("b2", proxy_capacity=None)])
    for path in NULL:
        reasons = [(r["code"], r["instances"]) for r in fields[path]["null_reasons"]]
        assert reasons == [("engine_asleep", ["b1"]), ("not_wired", ["b2"])], path
        assert "asleep" in fields[path]["null_reasons"][0]["detail"]


async def test_awake_members_are_not_blamed_on_sleep(
        canned: CannedPool, make_bridge: MakeBridge) -> None:
    fields = await _sources(canned, make_bridge, [Inst("b1", proxy_capacity=None)])
    codes = [r["code"] for r in fields["load.capacity"]["null_reasons"]]
    assert codes == ["not_wired"]


async def test_the_local_view_gives_an_asleep_member_no_capacity(
        canned: CannedPool, make_bridge: MakeBridge) -> None:
    instances = [Inst("b1", admission="asleep"), Inst("b2")]
    canned.vector = [*pool_series(PID, value="1"), *raw_series(PID, instances)]
    canned.set_local(PID, [])
    doc = await (await make_bridge(canned.url)).get("/debug/pool_resource?detail=local")
    rows = {i["instance_id"]: i for i in doc["instances"]}
    assert rows["b1"]["admission_state"] == "asleep"
    assert rows["b1"]["capacity"] == {"value": None, "source": None}
    assert rows["b2"]["capacity"] == {"value": 8.0, "source": "configured"}
