"""The Proxy bridge's cache follows the rules' evaluations of its own pool: the probe
asks when they last wrote this pool's rollups, and only a move reads the summary and
the Proxy-local series again."""

from __future__ import annotations

from harness.canned_prometheus import pool_series
from poolscope.bridge.promql import scoped
from poolscope.bridge.queries import EVALUATED_QUERY
from tests.proxy_bridge.conftest import PID, MakeBridge
from tests.proxy_bridge.pool_data import CannedPool, Inst, raw_series
from tests.scheduler_bridge.conftest import FakeClock

PROBES = "poolscope_proxy_bridge_probes_total"


async def test_the_probe_reads_this_pools_timestamp_and_nothing_else(
        canned: CannedPool, make_bridge: MakeBridge, clock: FakeClock) -> None:
    canned.vector = [*pool_series(PID), *raw_series(PID, [Inst("i-1")])]
    canned.set_local(PID, [Inst("i-1")])
    canned.rollups_written_at = clock.now
    bridge = await make_bridge(canned.url, cache_ttl_s=1.0, evaluation_interval_s=5.0)
    await bridge.get("/debug/pool_resource")
    full_read = len(canned.queries)

    for _ in range(3):
        clock.now += 5
        assert (await bridge.get("/debug/pool_resource?detail=local"))["instances"]
    probe = scoped(EVALUATED_QUERY, PID)
    assert [q for q, _ in canned.queries[full_read:]] == [probe] * 3
    assert bridge.registry.get_sample_value(PROBES, {"outcome": "unchanged"}) == 3

    canned.rollups_written_at = clock.now  # the rules ran again
    clock.now += 1
    moved = await bridge.http.get("/debug/pool_resource")
    assert moved.headers["X-Poolscope-Generated-At"] == f"{clock.now:.3f}"
    assert len(canned.queries) == 2 * full_read + 4  # the probe, then a full read
