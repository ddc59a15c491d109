"""bench.scheduling's closed loop, run small: the real fleet, Prometheus, rules and
bridge, a Scheduler stand-in reading the summary as a Scheduler would. Nothing here
times anything: the figures belong to the benchmark (docs/scheduling.md)."""

from __future__ import annotations

import time
from pathlib import Path

import aiohttp
import pytest

from bench.scheduling.fleet import SIM_POOLS, monitoring, running_fleet
from bench.scheduling.loop import Cell, calibrate, run_cell, wait_for_idle_summary
from bench.scheduling.outcome import outcome
from poolscope.scheduler_bridge.client import SchedulerBridgeClient

pytestmark = pytest.mark.integration


async def test_the_closed_loop_routes_by_a_summary_with_its_scrape_time(
        tmp_path: Path) -> None:
    with running_fleet("sim", SIM_POOLS, tmp_path) as fleet:
        lengths = await calibrate(fleet, 4, 20)
        assert lengths.service_s[0] < lengths.service_s[1]
        assert 0 < lengths.decode_s[0] < lengths.decode_s[1]
        capacities = {p.spec.proxy_id: p.spec.capacity for p in fleet.pools}
        with monitoring(fleet, 1.0, 0.5) as mon:
            async with aiohttp.ClientSession() as session:
                client = SchedulerBridgeClient(mon.bridge_url, session)
                assert await wait_for_idle_summary(client, list(capacities), 90)
                snap = await client.snapshot()
            for summary in snap.pools.values():
                # The scrape behind the pool's inflight, before the rules wrote it.
                sampled = summary.load.inflight_sampled_at
                assert sampled is not None
                assert sampled <= time.time()
                assert sampled <= summary.generated_at + 0.001
            cells = [Cell(name, 0.6, 1.0, "poisson", seed=3, duration_s=6.0, ttl_s=0.5,
                          replicas=replicas)
                     for name, replicas in (("picker", 2), ("picker_heartbeat", 1),
                                            ("oracle", 1))]
            # The bridge stopped for 3 s of the 6: the picker places every request still.
            cells.append(Cell("picker", 0.6, 1.0, "poisson", seed=3, duration_s=6.0,
                              ttl_s=0.5, outage=(1.0, 3.0)))
            for cell in cells:
                records, local = await run_cell(fleet, mon, cell, lengths, "pool-b")
                result = outcome(records, lengths, capacities)
                assert result.refused == 0, [r.error or r.status for r in records]
                assert len({r.pool for r in records}) >= 2  # the load was spread
                assert all(r.end is not None and r.end > r.arrival for r in records)
                assert local and all(r.pool == "pool-b" and r.ok for r in local)
