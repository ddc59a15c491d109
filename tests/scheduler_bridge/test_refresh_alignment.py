"""The cache follows the rules' evaluations: every pool is read again only once the
rules wrote new rollups, found by a probe of their timestamp alone (docs/design.md,
"How old is what a bridge serves").

The canned Prometheus plays the rules by hand: `rollups_written_at` is when they last
ran, and the test clock moves without sleeping."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from harness.canned_prometheus import CannedPrometheus, pool_series
from harness.polling import until
from harness.prometheus import REPO
from poolscope.bridge.app import Settings
from poolscope.scheduler_bridge.__main__ import build_parser
from tests.scheduler_bridge.conftest import Bridge, FakeClock, MakeBridge, aged

POOLS = "/debug/proxy_pool_resources"
INTERVAL_S = 5.0  # the rules' evaluation interval the bridge is told
TTL_S = 1.0  # how often, at most, it probes once an evaluation is due
PROBES = "poolscope_scheduler_bridge_probes_total"
REFRESHES = "poolscope_scheduler_bridge_refreshes_total"
LOOKUPS = "poolscope_scheduler_bridge_cache_requests_total"


async def aligned(make_bridge: MakeBridge, canned: CannedPrometheus, clock: FakeClock,
                  **settings: float) -> Bridge:
    """A bridge whose first full read found rollups the rules wrote just now."""
    canned.vector = pool_series("a")
    canned.rollups_written_at = clock.now
    bridge = await make_bridge(canned.url, cache_ttl_s=TTL_S,
                               evaluation_interval_s=INTERVAL_S, **settings)
    assert (await get(bridge, POOLS))["stale"] is False
    return bridge


async def get(bridge: Bridge, path: str, status: int = 200) -> dict:
    resp = await bridge.http.get(path)
    assert resp.status == status, await resp.text()
    return await resp.json()


async def test_nothing_is_asked_before_the_rules_are_due_to_write(
        canned: CannedPrometheus, make_bridge: MakeBridge, clock: FakeClock) -> None:
    bridge = await aligned(make_bridge, canned, clock)
    asked = len(canned.queries)
    for _ in range(4):
        clock.now += 1.2  # past the TTL each time, never past T + the interval
        await get(bridge, POOLS)
    assert len(canned.queries) == asked
    assert bridge.metric(LOOKUPS, result="hit") == 4


async def test_no_full_read_while_the_timestamp_stands_still(
        canned: CannedPrometheus, make_bridge: MakeBridge, clock: FakeClock) -> None:
    bridge = await aligned(make_bridge, canned, clock)
    first = len(canned.rollup_queries)
    clock.now += INTERVAL_S
    for _ in range(8):
        await get(bridge, POOLS)
        clock.now += TTL_S / 2
    # One probe per TTL once the evaluation was due: 4 over these 4 s, and no full read.
    assert len(canned.rollup_queries) == first
    assert bridge.metric(PROBES, outcome="unchanged") == 4
    assert len(canned.queries) == 2 * first + 4
    assert bridge.metric(REFRESHES, outcome="ok") == 1


async def test_one_full_read_when_the_timestamp_moves_however_many_ask(
        canned: CannedPrometheus, make_bridge: MakeBridge, clock: FakeClock) -> None:
    # However slowly the clients arrive, each waits for the probe in flight.
    bridge = await aligned(make_bridge, canned, clock, answer_within_s=30.0)
    written = canned.rollups_written_at
    assert written is not None
    clock.now += INTERVAL_S
    canned.rollups_written_at = written + INTERVAL_S  # the rules ran again
    canned.vector = pool_series("a", value="7")
    canned.gate = asyncio.Event()  # hold the probe until every client has asked
    asked = len(canned.queries)
    requests = [asyncio.create_task(bridge.http.get(POOLS)) for _ in range(50)]
    await until(lambda: bridge.metric(LOOKUPS, result="shared"), lambda n: n == 49,
                "every other client joined the probe in flight")
    canned.gate.set()
    answers = await asyncio.gather(*requests)
    bodies = [await r.json() for r in answers]
    assert len(canned.rollup_queries) == 2
    assert len(canned.queries) == asked + 3  # the probe, then the rollups and their time
    assert bridge.metric(PROBES, outcome="moved") == 1
    assert bridge.metric(REFRESHES, outcome="ok") == 2
    assert {b["generated_at"] for b in bodies} == {round(clock.now, 3)}
    assert {b["pools"]["a"]["load"]["inflight_total"] for b in bodies} == {7.0}
    assert {r.headers["X-Poolscope-Age-S"] for r in answers} == {"0.000"}


async def test_staleness_is_still_reported_when_the_rules_stop(
        canned: CannedPrometheus, make_bridge: MakeBridge, clock: FakeClock) -> None:
    bridge = await aligned(make_bridge, canned, clock, fresh_for_s=15.0, stale_after_s=30.0)
    clock.now += 10
    assert (await get(bridge, POOLS))["stale"] is False  # two evaluations late: still fresh
    clock.now += 6
    old, age = await aged(bridge, POOLS)
    assert (old["stale"], age) == (True, 16.0)
    assert (await get(bridge, "/readyz", 503))["age_s"] == 16.0
    clock.now += 15
    gone = await get(bridge, POOLS, 503)
    assert "written 31.0 s ago" in gone["error"]
    assert len(canned.rollup_queries) == 1  # probes found nothing new all along

    canned.rollups_written_at = clock.now  # the rules run again
    clock.now += TTL_S
    back, age = await aged(bridge, POOLS)
    assert (back["stale"], age) == (False, TTL_S)
    assert len(canned.rollup_queries) == 2


async def test_a_failure_is_retried_with_a_full_read(
        canned: CannedPrometheus, make_bridge: MakeBridge, clock: FakeClock) -> None:
    bridge = await aligned(make_bridge, canned, clock)
    clock.now += INTERVAL_S
    canned.fail_status = 503
    down, age = await aged(bridge, POOLS)
    assert (down["stale"], age) == (True, INTERVAL_S)
    assert bridge.metric(PROBES, outcome="error") == 1
    assert len(canned.rollup_queries) == 1  # the probe failed: nothing else was asked

    clock.now += TTL_S
    await get(bridge, POOLS)  # a full read, failing again
    assert len(canned.rollup_queries) == 2
    assert bridge.metric(REFRESHES, outcome="error") == 1

    canned.fail_status = None
    clock.now += TTL_S
    # The rollups did not move, yet the last attempt failed: a full read, fresh again.
    back = await get(bridge, POOLS)
    assert (back["stale"], back["generated_at"]) == (False, round(clock.now, 3))
    assert len(canned.rollup_queries) == 3
    assert bridge.metric(PROBES, outcome="error") == 1


async def test_unreadable_timestamps_fall_back_to_a_full_read_per_ttl(
        canned: CannedPrometheus, make_bridge: MakeBridge, clock: FakeClock) -> None:
    """Without the rollups' age nothing says when the rules write next."""
    canned.vector = pool_series("a")
    canned.fail_matching = "timestamp("
    bridge = await make_bridge(canned.url, cache_ttl_s=TTL_S, evaluation_interval_s=INTERVAL_S)
    for _ in range(3):
        assert (await get(bridge, POOLS))["stale"] is True
        clock.now += TTL_S
    assert len(canned.rollup_queries) == 3
    assert bridge.metric(PROBES, outcome="unchanged") + bridge.metric(
        PROBES, outcome="moved") == 0


def test_the_default_interval_is_the_deployed_rules_interval() -> None:
    config = yaml.safe_load((Path(REPO) / "deploy/prometheus/prometheus.yml").read_text())
    interval = config["global"]["evaluation_interval"]
    assert interval.endswith("s")
    assert Settings.evaluation_interval_s == float(interval.removesuffix("s"))
    args = build_parser().parse_args(["--prometheus-url", "http://127.0.0.1:1"])
    assert args.evaluation_interval == Settings.evaluation_interval_s


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "soon"])
def test_an_interval_that_is_not_a_positive_number_is_refused(
        value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["--prometheus-url", "http://127.0.0.1:1",
                                   "--evaluation-interval", value])
    assert exit_.value.code == 2
    assert "argument --evaluation-interval:" in capsys.readouterr().err


async def test_a_snapshot_with_a_failed_shard_is_read_again_at_the_next_ttl(
        canned: CannedPrometheus, make_bridge: MakeBridge, clock: FakeClock) -> None:
    """Its fields are null for a failure, not for want of data: waiting for the rules to
    write again would keep them null for an evaluation, or until --stale-after."""
    canned.vector = pool_series("a")
    canned.rollups_written_at = clock.now
    canned.fail_matching = "__name__!~"  # the last of two shards
    bridge = await make_bridge(canned.url, cache_ttl_s=TTL_S, query_shards=2,
                               evaluation_interval_s=INTERVAL_S)
    await get(bridge, POOLS)
    assert bridge.metric(REFRESHES, outcome="partial") == 1
    canned.fail_matching = None
    clock.now += TTL_S  # the rules have not written again
    await get(bridge, POOLS)
    assert bridge.metric(REFRESHES, outcome="ok") == 1
    assert bridge.metric(PROBES, outcome="unchanged") == 0
