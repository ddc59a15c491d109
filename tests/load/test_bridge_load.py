"""The Scheduler bridge under concurrent clients: every answer a fresh snapshot, every
pool read at most once per evaluation of the rules and Prometheus asked at most once
per cache TTL, however many clients ask.

The harness is bench/bridge_load.py's, run small enough for `make test`; the 200
clients x 30 s run is the same test behind POOLSCOPE_LONG=1. Nothing here times
anything: latency figures belong to the benchmark.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.bridge_load import Result, Shape, run, side_by_side
from harness.prometheus import REPO

pytestmark = pytest.mark.integration

LONG = os.environ.get("POOLSCOPE_LONG") == "1"


def check(result: Result) -> None:
    assert result.load.requests > result.shape.clients  # every client got past its first
    assert not result.load.errors
    assert result.pools_served == result.shape.pools
    # The rollups moved during the run and were read again; no more than once per
    # evaluation, and no more backend rounds than one per TTL.
    assert 1 <= result.refreshes <= result.refresh_bound
    assert result.probes.get("moved", 0) == result.refreshes  # each read followed a move
    assert result.rounds <= result.round_bound
    # Two queries per full read (one shard, and the rollups' timestamps), one per probe,
    # and Prometheus saw exactly what the bridge sent: the bounds hold on the backend,
    # not only in the bridge's own account.
    assert result.backend_queries == 2 * result.refreshes + sum(result.probes.values())
    assert result.prometheus_queries == result.backend_queries
    assert result.cache_lookups.get("miss") == result.rounds


async def test_two_bridges_in_turns_revalidating_clients_get_304s(tmp_path: Path) -> None:
    """Side by side (this tree as its own baseline, started as a checkout is): each
    bridge's counts are its own turns', and clients that hold the body get a 304."""
    shape = Shape(clients=10, pools=20, cache_ttl_s=0.5, evaluation_interval_s=1.0,
                  interval_s=0.1, duration_s=2)
    results = await side_by_side(shape, tmp_path, REPO, turns=2)
    assert [r.turns for r in results] == [2, 2]
    for result in results:
        check(result)
        assert result.load.statuses[304] > result.load.statuses[200] > 0
    plain = await run(Shape(clients=10, pools=20, cache_ttl_s=0.5, evaluation_interval_s=1.0,
                            interval_s=0.1, duration_s=2, revalidate=False), tmp_path / "plain")
    assert set(plain.load.statuses) == {200}


async def test_fifty_clients_share_one_read_per_evaluation(tmp_path: Path) -> None:
    check(await run(Shape(clients=50, pools=20, cache_ttl_s=0.5, evaluation_interval_s=1.0,
                          duration_s=5), tmp_path))


@pytest.mark.slow
@pytest.mark.skipif(not LONG, reason="the 200 clients x 30 s run needs POOLSCOPE_LONG=1")
async def test_two_hundred_clients_for_thirty_seconds(tmp_path: Path) -> None:
    check(await run(Shape(clients=200, pools=100), tmp_path))
