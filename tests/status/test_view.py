"""The one view model: what it keeps unknown, what it keeps apart, and what it sums."""

from __future__ import annotations

import json

from harness.canned_prometheus import Series
from poolscope.scheduler_bridge.client import BridgeSnapshot, parse_pool
from poolscope.scheduler_bridge.status.model import FleetView, GpuModelView, build_view, percent
from tests.status.fleet import GIB, H100, blind_pool, busy_pool, gpu_series, summaries


def view_of(vector: list[Series], *, stale: bool = False) -> FleetView:
    pools = {pid: parse_pool(doc) for pid, doc in summaries(vector).items()}
    return build_view(BridgeSnapshot(1_700_000_000.0, stale, 0.5, pools))


def test_a_measured_pool() -> None:
    (pool,) = view_of(busy_pool("p")).pools
    assert (pool.load_ratio, pool.saturation) == (0.62, 0.35)
    assert (pool.alive, pool.stale, pool.missing) == (4, 1, 0)
    assert pool.gpu_util_ratio is not None and abs(pool.gpu_util_ratio - 0.42) < 1e-12
    assert pool.gpu_memory_used_ratio == 0.3
    assert pool.admission_state == "accepting"
    assert pool.gpus == (GpuModelView(H100, 8, 1, 640.0 * GIB, 3.5),)
    assert (pool.gpus[0].total, pool.gpus[0].free) == (9, 4.5)


def test_unknown_stays_unknown() -> None:
    (pool,) = view_of(blind_pool("p")).pools
    assert pool.load_ratio is None and pool.saturation is None
    assert pool.gpu_util_ratio is None and pool.gpu_memory_used_ratio is None
    assert pool.missing is None and pool.admission_state is None
    assert pool.gpus is None
    assert percent(pool.load_ratio) == "?"


def test_idle_and_idle_unknown_are_kept_apart() -> None:
    (pool,) = view_of(blind_pool("p")).pools
    assert (pool.idle, pool.idle_unknown) == (0, 2)


def test_fleet_gpu_totals_sum_per_model_and_an_unknown_part_is_unknown() -> None:
    vector = [*busy_pool("a"), *gpu_series("b", H100, "2", "3", None, used="1.5"),
              *gpu_series("b", "A10", "1", "0", str(24 * GIB)), *blind_pool("c")]
    view = view_of(vector)
    assert view.gpu_models == (GpuModelView("A10", 1, 0, 24.0 * GIB),
                               GpuModelView(H100, 10, 4, None, 5.0))
    assert view.gpu_models[1].free == 5.0 and view.gpu_models[0].free is None


def test_json_is_the_same_view_as_data() -> None:
    view = view_of([*busy_pool("a"), *blind_pool("b")], stale=True)
    doc = json.loads(json.dumps(view.as_dict()))
    assert doc["stale"] is True
    assert [p["proxy_id"] for p in doc["pools"]] == ["a", "b"]
    assert doc["pools"][1]["load_ratio"] is None and doc["pools"][1]["gpus"] is None
    assert doc["pools"][0]["gpus"] == [{"model": H100, "healthy": 8, "unhealthy": 1,
                                        "memory_total_bytes": 640.0 * GIB, "used": 3.5}]


def test_a_model_with_no_healthy_gpu_uses_none_of_them() -> None:
    # Every H100 of pool b fails its reads: no `used` rollup, yet none is busy.
    view = view_of([*busy_pool("a"), *gpu_series("b", H100, "0", "2", None)])
    (fleet,) = view.gpu_models
    assert (fleet.healthy, fleet.unhealthy, fleet.used, fleet.free) == (8, 3, 3.5, 4.5)
