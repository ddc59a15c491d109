"""`/debug/pool_resource_sources` for the fields whose null has more causes than a
member's host: the pool's resource freshness (null while the pool counts a member that
serves no host sample age) and its network rates (null until each exporter's own minute
window is covered). Each branch of `diagnosis_instance.freshness` and
`diagnosis_instance.network` is driven by the series a running system would show."""

from __future__ import annotations

from typing import Any

import pytest

from harness.canned_prometheus import Series, pool_series, series
from poolscope.bridge.local_queries import FRESHNESS_RULE
from poolscope.contract import catalog as c
from poolscope.contract.fields import FIELDS
from poolscope.contract.thresholds import FRESH_S, MEMBER_MEMORY, RATE_EDGE_S, RATE_WINDOW_S
from tests.proxy_bridge.conftest import PID, MakeBridge
from tests.proxy_bridge.pool_data import CannedPool, Inst, raw_series

SOURCES = "/debug/pool_resource_sources"
ROLLUP = {f.path: f.rollup for f in FIELDS}
NULL_WHEN = {f.path: f.null_when for f in FIELDS}
FRESHNESS = ("health.resource_freshness_s_avg", "health.resource_freshness_s_max")
NETWORK = ("utilization.network_rx_mbps_total", "utilization.network_tx_mbps_total")

EXPORTER_DOWN = "no poolscope_collector_success series: the Instance exporter is down"
NONE_ANSWERS = ("no Instance exporter that declares the pool answers its scrapes "
                f"({c.COLLECTOR_SUCCESS.name} absent for all)")
COUNTS_MORE = "every Instance exporter answering for the pool serves a host sample age"


def _rollups_without(*paths: str) -> list[Series]:
    dropped = {ROLLUP[p] for p in paths}
    return [s for s in pool_series(PID, value="1") if s[0]["__name__"] not in dropped]


def _self_declared(instances: list[Inst]) -> list[Series]:
    """Only Instance exporters declaring the pool: no Proxy-side exporter is scraped."""
    return [s for s in raw_series(PID, instances, proxy_up=False)
            if s[0]["__name__"] != "up" or s[0].get("job") != "poolscope-proxy"]


def _gateway(instances: list[Inst], members: int) -> list[Series]:
    """A gateway adapter counting `members` endpoints, plus the Instance exporters."""
    gie = "gateway:gie"
    return [series(c.PROXY_COLLECTOR_SUCCESS.name, PID, "1", "exporter", collector="gateway"),
            series(c.POOL_INSTANCES_REGISTERED.name, PID, str(members), gie),
            series(c.POOL_INSTANCES_ALIVE.name, PID, str(members), gie),
            *_self_declared(instances)]


def _with_age(raw: list[Series], instance_id: str, age: float) -> list[Series]:
    """`raw` with the host sample age of `instance_id` replaced by `age`."""
    return [(m, f"{age:g}") if m["__name__"] == FRESHNESS_RULE
            and m.get("instance_id") == instance_id else (m, v) for m, v in raw]


async def _reasons(canned: CannedPool, make_bridge: MakeBridge, raw: list[Series],
                   null: tuple[str, ...]) -> dict[str, list[dict[str, Any]]]:
    """The null_reasons the bridge serves for `null` (whose rollups are dropped)."""
    canned.vector = [*_rollups_without(*null), *raw]
    canned.set_local(PID, [])
    doc = await (await make_bridge(canned.url)).get(SOURCES)
    assert doc["proxy_id"] == PID and doc["diagnosis_error"] is None
    fields = {f["path"]: f for f in doc["fields"]}
    out = {}
    for path in null:
        entry = fields[path]
        assert entry["value"] is None, (path, entry)
        assert entry["null_reason"] == "; ".join(r["detail"] for r in entry["null_reasons"])
        out[path] = entry["null_reasons"]
    return out


def _only(reasons: list[dict[str, Any]], code: str, instances: list[str]) -> str:
    """The single reason's detail, after checking its code and the Instances it names."""
    assert [(r["code"], r["instances"]) for r in reasons] == [(code, instances)], reasons
    return str(reasons[0]["detail"])


# --- health.resource_freshness_s_avg / _max ---------------------------------------

async def test_freshness_names_a_registered_member_whose_exporter_is_down(
        canned: CannedPool, make_bridge: MakeBridge) -> None:
    raw = raw_series(PID, [Inst("i-1"), Inst("i-2", exporter_up=False)])
    for path, reasons in (await _reasons(canned, make_bridge, raw, FRESHNESS)).items():
        detail = _only(reasons, "instance_exporter_down", ["i-2"])
        assert detail.startswith(EXPORTER_DOWN), (path, detail)


async def test_freshness_names_a_self_declared_member_with_a_stale_host(
        canned: CannedPool, make_bridge: MakeBridge) -> None:
    """A member that answers is diagnosed by name before the pool's count is blamed."""
    raw = _with_age(_self_declared([Inst("i-1"), Inst("i-2")]), "i-2", FRESH_S + 30)
    for path, reasons in (await _reasons(canned, make_bridge, raw, FRESHNESS)).items():
        detail = _only(reasons, "resource_stale", ["i-2"])
        assert f"no host sample younger than {FRESH_S:g}s" in detail, (path, detail)
        assert f"= {FRESH_S + 30:g}" in detail, (path, detail)


@pytest.mark.parametrize("shape", ["self-declared", "gateway"])
async def test_freshness_when_no_instance_exporter_answers(
        canned: CannedPool, make_bridge: MakeBridge, shape: str) -> None:
    down = [Inst("i-1", exporter_up=False), Inst("i-2", exporter_up=False)]
    raw = _self_declared(down) if shape == "self-declared" else _gateway(down, members=2)
    for path, reasons in (await _reasons(canned, make_bridge, raw, FRESHNESS)).items():
        assert _only(reasons, "instance_exporter_down", []) == NONE_ANSWERS, path


@pytest.mark.parametrize("shape", ["self-declared", "gateway"])
async def test_freshness_when_the_pool_counts_more_members_than_answer(
        canned: CannedPool, make_bridge: MakeBridge, shape: str) -> None:
    """Every exporter that answers serves a fresh age, yet the rollup is null: a gateway
    endpoint without an exporter, or a silent self-declared member still counted."""
    up = [Inst("i-1"), Inst("i-2")]
    raw = _self_declared(up) if shape == "self-declared" else _gateway(up, members=3)
    for path, reasons in (await _reasons(canned, make_bridge, raw, FRESHNESS)).items():
        detail = _only(reasons, "instance_exporter_down", [])
        assert detail.startswith(COUNTS_MORE), (path, detail)
        assert "but the pool counts more members (instances.total)" in detail, detail
        assert f"within {MEMBER_MEMORY} (still counted, as stale)" in detail, detail


async def test_freshness_of_a_registered_pool_with_every_host_fresh_blames_the_rollup(
        canned: CannedPool, make_bridge: MakeBridge) -> None:
    """The Proxy's registry is the member list: no uncounted member to suspect."""
    raw = raw_series(PID, [Inst("i-1"), Inst("i-2")])
    for path, reasons in (await _reasons(canned, make_bridge, raw, FRESHNESS)).items():
        detail = _only(reasons, "rollup_absent", [])
        assert ROLLUP[path] in detail and COUNTS_MORE not in detail, (path, detail)


# --- utilization.network_rx_mbps_total / _tx_mbps_total ---------------------------

@pytest.mark.parametrize("shape", ["registered", "self-declared"])
async def test_network_with_every_host_sampled_is_the_rate_window(
        canned: CannedPool, make_bridge: MakeBridge, shape: str) -> None:
    up = [Inst("i-1"), Inst("i-2")]
    raw = raw_series(PID, up) if shape == "registered" else _self_declared(up)
    for path, reasons in (await _reasons(canned, make_bridge, raw, NETWORK)).items():
        detail = _only(reasons, "rate_window_not_covered", [])
        assert detail == f"every member's host is sampled, but {NULL_WHEN[path]}", detail
        assert f"own samples span {RATE_WINDOW_S - RATE_EDGE_S:g} s" in detail, detail


async def test_network_with_a_member_exporter_down_is_the_host(
        canned: CannedPool, make_bridge: MakeBridge) -> None:
    raw = raw_series(PID, [Inst("i-1"), Inst("i-2", exporter_up=False)])
    for path, reasons in (await _reasons(canned, make_bridge, raw, NETWORK)).items():
        detail = _only(reasons, "instance_exporter_down", ["i-2"])
        assert detail.startswith(EXPORTER_DOWN), (path, detail)
        assert "rate_window_not_covered" not in str(reasons)


async def test_network_with_a_stale_host_is_the_host(
        canned: CannedPool, make_bridge: MakeBridge) -> None:
    raw = _with_age(raw_series(PID, [Inst("i-1"), Inst("i-2")]), "i-1", FRESH_S + 30)
    for path, reasons in (await _reasons(canned, make_bridge, raw, NETWORK)).items():
        detail = _only(reasons, "resource_stale", ["i-1"])
        assert f"no host sample younger than {FRESH_S:g}s" in detail, (path, detail)
