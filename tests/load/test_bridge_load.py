"""The Scheduler bridge under concurrent clients: every answer a fresh snapshot, and
Prometheus asked at most once per cache TTL however many clients ask (issue 9).

The harness is bench/bridge_load.py's, run small enough for `make test`; the issue's
200 clients x 30 s run is the same test behind POOLSCOPE_LONG=1. Nothing here times
anything: latency figures belong to the benchmark.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.bridge_load import Result, run

pytestmark = pytest.mark.integration

LONG = os.environ.get("POOLSCOPE_LONG") == "1"


def check(result: Result) -> None:
    assert result.load.requests > result.clients  # every client got past its first answer
    assert not result.load.errors
    assert result.pools_served == result.pools
    # More than one refresh: the cache does expire; no more than one per TTL.
    assert 2 <= result.refreshes <= result.refresh_bound
    # Two queries per refresh (one shard, and the rollups' timestamps), and Prometheus
    # saw exactly what the bridge sent: the bound holds on the backend, not only in the
    # bridge's own account.
    assert result.backend_queries == 2 * result.refreshes
    assert result.prometheus_queries == result.backend_queries
    assert result.cache_lookups.get("miss") == result.refreshes


async def test_fifty_clients_share_one_refresh_per_ttl(tmp_path: Path) -> None:
    check(await run(clients=50, duration_s=5, pools=20, cache_ttl_s=1.0,
                    max_requests=1_000_000, workdir=tmp_path))


@pytest.mark.slow
@pytest.mark.skipif(not LONG, reason="the 200 clients x 30 s run needs POOLSCOPE_LONG=1")
async def test_two_hundred_clients_for_thirty_seconds(tmp_path: Path) -> None:
    check(await run(clients=200, duration_s=30, pools=100, cache_ttl_s=1.0,
                    max_requests=1_000_000, workdir=tmp_path))
