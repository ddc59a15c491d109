"""OwnRequests: a Scheduler's own requests per pool, now and at the summary's moment."""

from __future__ import annotations

from dataclasses import replace

import pytest

from poolscope.scheduler_bridge.client import BridgeSnapshot, PoolSummary, parse_pool
from poolscope.scheduler_bridge.own_requests import OwnRequests, measured_at


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def pool(proxy_id: str = "a", **load: float | None) -> PoolSummary:
    doc = {"schema_version": 1, "proxy_id": proxy_id, "generated_at": 1000.0,
           "load": {"capacity": 8.0, **load}}
    return parse_pool(doc)


def own_with_history(clock: Clock) -> OwnRequests:
    """Two sent at 1000, one more at 1005, one of the three finished at 1010."""
    own = OwnRequests(clock=clock)
    first = own.sent("a")
    own.sent("a")
    clock.now = 1005.0
    own.sent("a")
    clock.now = 1010.0
    own.finished(first)
    return own


def test_in_flight_now_and_at_any_remembered_moment() -> None:
    clock = Clock()
    own = own_with_history(clock)
    assert own.mine_now("a") == 2
    assert [own.in_flight("a", t) for t in (999.0, 1000.0, 1004.9, 1005.0, 1012.0)] == \
        [0, 2, 2, 3, 2]
    assert (own.mine_now("never-used"), own.in_flight("never-used", 1000.0)) == (0, 0)


def test_requests_now_replaces_mine_then_by_mine_now() -> None:
    clock = Clock()
    own = own_with_history(clock)
    # At 1005 the pool held 7 in flight and 1 queued: 3 of them mine, so 5 are others'.
    summary = pool(inflight_total=7.0, ready_queue_depth=1.0, prepare_queue_depth=0.0)
    assert own.requests_now(summary, 1005.0) == 5 + 2
    others = own.others(summary, 1005.0)
    assert others is not None and (others.then, others.mine_then) == (5, 3)
    assert own.requests_with("a", others, replicas=3) == 5 + 2 * (2 - 3) + 2


def test_a_pool_without_queues_is_counted_by_its_inflight() -> None:
    own = own_with_history(Clock())
    assert own.requests_now(pool(inflight_total=4.0), 1005.0) == (4 - 3) + 2


def test_others_never_count_below_zero() -> None:
    """A summary that has not seen my requests yet (they were still being prepared) does
    not make the pool look emptier than mine alone."""
    own = own_with_history(Clock())
    assert own.requests_now(pool(inflight_total=1.0), 1005.0) == 0 + 2


def test_unknown_inflight_or_capacity_is_no_estimate() -> None:
    own = own_with_history(Clock())
    assert own.requests_now(pool(inflight_total=None), 1005.0) is None
    # Not "now": a summary whose time is unknown cannot be corrected for mine.
    assert own.requests_now(pool(inflight_total=3.0), None) is None


def test_a_moment_past_the_horizon_is_unknown_not_zero() -> None:
    clock = Clock()
    own = OwnRequests(horizon_s=10.0, clock=clock)
    for step in range(30):
        clock.now = 1000.0 + step
        own.sent("a")
    assert own.mine_now("a") == 30
    assert own.in_flight("a", 1000.5) is None  # forgotten
    assert own.in_flight("a", 1011.0) == 12  # a horizon back is always remembered
    assert own.in_flight("a", 1028.5) == 29
    assert own.requests_now(pool(inflight_total=5.0), 1000.5) is None


def test_a_pool_idle_for_long_still_knows_its_count_a_horizon_back() -> None:
    """The last change before the horizon holds the count from then on: a pool last used
    long ago has had 0 of mine in flight all the while, which is known, not forgotten."""
    clock = Clock(0.0)
    own = OwnRequests(horizon_s=300.0, clock=clock, request_timeout_s=5000.0)
    ticket = own.sent("a")
    clock.now = 1.0
    own.finished(ticket)
    clock.now = 1000.0
    own.sent("a")
    assert [own.in_flight("a", t) for t in (700.0, 995.0, 999.9, 1000.0)] == [0, 0, 0, 1]
    assert own.in_flight("a", 0.5) is None


def test_a_ticket_is_finished_once() -> None:
    own = OwnRequests(clock=Clock())
    ticket = own.sent("a")
    assert own.finished(ticket) is True
    with pytest.raises(ValueError, match="twice"):
        own.finished(ticket)
    with pytest.raises(ValueError, match="another OwnRequests"):
        OwnRequests(clock=Clock()).finished(own.sent("b"))


def test_a_request_never_finished_expires_counted_and_its_pool_is_forgotten() -> None:
    clock = Clock()
    own = OwnRequests(horizon_s=60.0, clock=clock, request_timeout_s=100.0)
    lost, kept = own.sent("a"), own.sent("b")
    clock.now += 50.0
    own.finished(kept)
    clock.now += 51.0
    assert (own.mine_now("a"), own.expired) == (0, 1)
    assert own.in_flight("a", 1050.0) == 1  # it was in flight then
    assert own.finished(lost) is False and own.expired == 1
    # Nothing of a or b in flight and no change within the horizon: both forgotten.
    clock.now += 70.0
    own.sent("c")
    assert own.pools() == 1 and own.in_flight("a", clock.now - 1) == 0


def test_measured_at_counts_back_from_the_receive_time_by_ages_on_one_clock() -> None:
    """Evaluated 4 s before it arrived (the bridge's age), scraped 2.5 s before that
    (Prometheus' instants, on a clock 500 s off this one): 6.5 s before 1001."""
    snapshot = BridgeSnapshot(generated_at=1500.1, stale=False, age_s=4.0, pools={},
                              rollups_at=1500.0)
    scraped = pool(inflight_total=1.0, inflight_sampled_at=1497.5)
    assert measured_at(scraped, snapshot, received_at=1001.0) == 994.5
    # An older bridge says no rollups_at: its generated_at stands in.
    older = replace(snapshot, rollups_at=None)
    assert measured_at(scraped, older, received_at=1001.0) == pytest.approx(994.4)
    unnamed = replace(scraped, load=replace(scraped.load, inflight_sampled_at=None))
    assert measured_at(unnamed, snapshot, received_at=1001.0) == 997.0
    ageless = replace(snapshot, age_s=None)
    assert measured_at(unnamed, ageless, received_at=1001.0) is None


def test_a_wall_clock_stepped_back_keeps_the_history_in_order() -> None:
    clock = Clock(1000.0)
    own = OwnRequests(clock=clock)
    own.sent("a")
    clock.now = 990.0  # NTP stepped the clock back 10 s
    second = own.sent("a")
    clock.now = 995.0
    own.finished(second)
    assert own.mine_now("a") == 1
    assert [own.in_flight("a", t) for t in (999.0, 1000.0, 1001.0)] == [0, 1, 1]


def test_pools_that_came_and_went_are_not_kept() -> None:
    """A thousand pools, each used for a while and deleted: the histories held are those
    of the pools used within about two horizons, not of every pool ever used."""
    clock = Clock(0.0)
    own = OwnRequests(horizon_s=60.0, clock=clock)
    for i in range(1000):
        own.finished(own.sent(f"pool-{i}"))
        clock.now += 10.0
    assert own.pools() <= 2 * 60 / 10 + 1
