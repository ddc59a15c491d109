"""PoolPicker: the decision, its fallback chain, replicas and clocks, on a clock of ours."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from poolscope.scheduler_bridge.client import BridgeError, BridgeSnapshot, parse_pool
from poolscope.scheduler_bridge.load_report import receive_report
from poolscope.scheduler_bridge.picker import Basis, NoDecision, PoolPicker

CAPACITIES = {"a": 8.0, "b": 4.0, "c": 2.0}


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def snapshot(at: float, age_s: float = 1.0, **pools: dict[str, Any]) -> BridgeSnapshot:
    """Pools as the bridge serves them, evaluated at `at` (another host's clock), each
    with `load` values and optionally a `state`; inflight scraped 2 s before."""
    docs = {p: parse_pool({
        "schema_version": 1, "proxy_id": p, "generated_at": at,
        "load": {"capacity": CAPACITIES.get(p, 4.0), "inflight_sampled_at": at - 2.0,
                 **{k: v for k, v in load.items() if k != "state"}},
        "health": {"pool_admission_state": load.get("state", "accepting")}})
        for p, load in pools.items()}
    return BridgeSnapshot(generated_at=at, stale=False, age_s=age_s, pools=docs,
                          rollups_at=at)


def picker(clock: Clock, seed: int = 0, **options: Any) -> PoolPicker:
    return PoolPicker(CAPACITIES, rng=random.Random(seed), clock=clock, **options)


def picks(p: PoolPicker, n: int) -> Counter[str]:
    return Counter(p.pick().proxy_id for _ in range(n))


def test_ranks_by_the_others_load_plus_its_own_and_spreads_without_a_new_summary() -> None:
    clock = Clock()
    p = picker(clock)
    held = {"a": 4.0, "b": 0.0, "c": 0.0}
    p.summary_received(snapshot(1000.0, **{k: {"inflight_total": v} for k, v in held.items()}))
    # (4+1)/8, (0+1)/4, (0+1)/2: b first.
    assert p.pick().proxy_id == "b"
    # 13 more with none finishing: the pools fill in step with their capacity, never a
    # herd on the pool that looked emptiest when the summary was written.
    counts = picks(p, 13) + Counter(b=1)
    fill = [(held[x] + counts[x]) / CAPACITIES[x] for x in CAPACITIES]
    assert max(fill) - min(fill) <= 0.5, counts


def test_ties_are_broken_at_random_not_by_name() -> None:
    firsts = Counter()
    for seed in range(60):
        p = picker(Clock(), seed)
        p.summary_received(snapshot(1000.0, a={"inflight_total": 7.0},
                                    b={"inflight_total": 3.0}, c={"inflight_total": 1.0}))
        firsts[p.pick().proxy_id] += 1
    assert set(firsts) == {"a", "b", "c"}


def test_a_pool_with_no_estimate_is_skipped_never_taken_as_empty() -> None:
    p = picker(Clock())
    p.summary_received(snapshot(1000.0, a={"inflight_total": 7.0},
                                b={"inflight_total": None}, c={"inflight_total": 1.0}))
    assert "b" not in picks(p, 20)
    # No capacity measured or configured: nothing to rank it by, whatever it holds.
    unsized = PoolPicker({"a": 8.0}, clock=Clock())
    unsized.summary_received(snapshot(1000.0, a={"inflight_total": 7.0},
                                      x={"inflight_total": 0.0, "capacity": None}))
    assert picks(unsized, 5) == Counter(a=5)


@pytest.mark.parametrize("state", ["asleep", "draining"])
def test_never_places_on_a_pool_not_accepting_while_another_is(state: str) -> None:
    p = picker(Clock())
    p.summary_received(snapshot(1000.0, a={"inflight_total": 8.0},
                                b={"inflight_total": 0.0, "state": state},
                                c={"inflight_total": 0.0, "capacity": 0.0}))
    assert picks(p, 30) == Counter(a=30)
    p.summary_received(snapshot(1001.0, a={"inflight_total": 0.0, "state": state},
                                b={"inflight_total": 0.0, "state": "asleep"},
                                c={"inflight_total": 0.0, "capacity": 0.0}))
    with pytest.raises(NoDecision):
        p.pick()
    assert p.stats.no_decision == 1


def test_a_refusing_pool_is_avoided_for_the_backoff_unless_it_is_the_only_one() -> None:
    clock = Clock()
    p = picker(clock, refusal_backoff_s=5.0)
    p.summary_received(snapshot(1000.0, a={"inflight_total": 8.0},
                                b={"inflight_total": 0.0}, c={"inflight_total": 2.0}))
    first = p.pick()
    assert first.proxy_id == "b"
    p.finished(first, refused=True)
    assert "b" not in picks(p, 5) and p.stats.refused == 1
    clock.now += 5.1
    assert p.pick().proxy_id == "b"
    only = PoolPicker({"b": 4.0}, clock=clock)
    only.finished(only.pick(), refused=True)
    assert only.pick().proxy_id == "b"


def report(proxy_id: str, inflight: float, capacity: float, at: float,
           received_at: float) -> Any:
    return receive_report({"schema_version": 1, "proxy_id": proxy_id, "generated_at": at,
                           "load": {"inflight_total": inflight, "capacity": capacity,
                                    "inflight_sampled_at": at}}, received_at)


def test_the_fallback_chain_report_then_summary_then_own_count() -> None:
    clock = Clock()
    p = picker(clock, report_max_age_s=3.0, summary_max_age_s=30.0)
    p.summary_received(snapshot(5000.0, a={"inflight_total": 0.0}, b={"inflight_total": 4.0},
                                c={"inflight_total": 2.0}))
    # a's Proxy reports 10 held: the report, a second old, wins over the summary's 0.
    p.report_received(report("a", 10.0, 8.0, at=7000.0, received_at=clock.now))
    clock.now += 1.0
    placed = p.pick()
    assert (placed.proxy_id, placed.basis) == ("b", Basis.SUMMARY)  # (4+1)/4 < (10+1)/8
    p.finished(placed)
    p.report_received(report("b", 4.0, 4.0, at=7001.0, received_at=clock.now))
    p.report_received(report("c", 2.0, 2.0, at=7001.0, received_at=clock.now))
    p.report_received(report("a", 0.0, 8.0, at=7001.0, received_at=clock.now))
    placed = p.pick()
    assert (placed.proxy_id, placed.basis) == ("a", Basis.REPORT)
    p.finished(placed)
    clock.now += 3.5  # the reports are too old: the summary again (a at 0 there too)
    assert p.pick().basis == Basis.SUMMARY
    clock.now += 30.0  # the summary is too old: each pool by this Scheduler's count
    placed = [p.pick() for _ in range(14)]
    assert {x.basis for x in placed} == {Basis.OWN_COUNT}
    counts = Counter(x.proxy_id for x in placed)
    assert abs(counts["a"] - 2 * counts["b"]) <= 2 and abs(counts["b"] - 2 * counts["c"]) <= 2
    assert p.stats.placed[Basis.OWN_COUNT] == 14


def test_nothing_known_is_no_decision() -> None:
    p = PoolPicker(clock=Clock())
    with pytest.raises(NoDecision, match="no pool is known"):
        p.pick()


def test_a_bridge_that_refuses_leaves_the_held_snapshot_ageing() -> None:
    clock = Clock()
    p = picker(clock, summary_max_age_s=30.0)
    p.summary_received(snapshot(1000.0, age_s=5.0, a={"inflight_total": 8.0},
                                b={"inflight_total": 4.0}, c={"inflight_total": 0.0}))
    p.summary_failed(BridgeError(503, "<html>Service Unavailable</html>"))
    clock.now += 24.0  # 29 s old: still the summary
    assert p.pick().basis == Basis.SUMMARY
    clock.now += 2.0
    assert p.pick().basis == Basis.OWN_COUNT
    assert p.stats.bridge_errors == 1 and "Service Unavailable" in str(p.stats.last_bridge_error)


def test_replicas_count_the_others_change_as_their_own() -> None:
    """x held 1 and y 2 at the scrape; this replica then sent one to x. Alone, x holds 2
    now, as y does: a tie. Told of 3 replicas, it takes the other two to have sent one
    each as well: x holds 4, and y is next."""
    seconds = set()
    for replicas, seed in [(1, s) for s in range(20)] + [(3, 0)]:
        clock = Clock()
        p = PoolPicker({"x": 4.0, "y": 4.0}, replicas=replicas, rng=random.Random(seed),
                       clock=clock)
        p.summary_received(snapshot(1000.0, age_s=0.0, x={"inflight_total": 1.0},
                                    y={"inflight_total": 2.0}))
        assert p.pick().proxy_id == "x"  # (1+1)/4 < (2+1)/4
        second = p.pick().proxy_id
        if replicas == 1:
            seconds.add(second)
        else:
            assert second == "y"
    assert seconds == {"x", "y"}


def test_power_of_two_choices_never_takes_the_worst_pool() -> None:
    p = picker(Clock(), choices=2)
    p.summary_received(snapshot(1000.0, a={"inflight_total": 0.0}, b={"inflight_total": 3.0},
                                c={"inflight_total": 6.0}))
    counts = Counter()
    for _ in range(60):
        placed = p.pick()
        counts[placed.proxy_id] += 1
        p.finished(placed)
    assert "c" not in counts and counts["b"] > 0 and counts["a"] > counts["b"]


def test_decisions_do_not_move_with_the_other_hosts_clocks() -> None:
    """The same snapshot stamped by a Prometheus whose clock is 100 s ahead or behind:
    the ages within it are the same, so is every decision. Six of a's requests, all
    this Scheduler's, were in flight at the scrape (2 s before the evaluation) and
    have finished since: a is the emptiest pool on every clock."""
    for skew in (-100.0, 0.0, 100.0):
        clock = Clock(997.0)
        p = picker(clock, seed=3)
        tickets = [p.own.sent("a") for _ in range(6)]
        clock.now = 999.5
        for t in tickets:
            p.own.finished(t)
        clock.now = 1000.0
        p.summary_received(snapshot(1000.0 + skew, age_s=1.0, a={"inflight_total": 6.0},
                                    b={"inflight_total": 1.0}, c={"inflight_total": 1.0}))
        # Measured 1 s + 2 s before it arrived, by this Scheduler's clock: at 997 mine
        # were 6, so the others' part of a is 0. (Read as Prometheus' own instant it
        # would be 6 at a skew of -100 s, before these were sent.)
        assert p.pick().proxy_id == "a", skew


def test_a_request_never_finished_expires_and_is_counted() -> None:
    clock = Clock()
    p = picker(clock, request_timeout_s=60.0)
    p.summary_received(snapshot(1000.0, a={"inflight_total": 0.0}, b={"inflight_total": 0.0},
                                c={"inflight_total": 0.0}))
    lost = p.pick()
    assert p.own.mine_now(lost.proxy_id) == 1
    clock.now += 61.0
    assert p.own.mine_now(lost.proxy_id) == 0 and p.own.expired == 1
    p.finished(lost)  # late: ignored, not counted twice
    assert p.own.mine_now(lost.proxy_id) == 0
    done = p.pick()
    p.finished(done)
    with pytest.raises(ValueError, match="twice"):
        p.finished(done)


def test_bad_options_are_refused() -> None:
    for options in ({"replicas": 0}, {"choices": 1}, {"report_max_age_s": -1.0}):
        with pytest.raises(ValueError):
            PoolPicker(CAPACITIES, **options)
    with pytest.raises(ValueError):
        PoolPicker({"a": 0.0})


def test_a_report_without_a_capacity_ranks_on_the_capacity_known_otherwise() -> None:
    """A gateway knows what a pool holds, not what it can take: its report is ranked with
    the summary's capacity, else the configured one."""
    clock = Clock()
    p = picker(clock)
    for proxy_id, held in (("a", 7.0), ("b", 0.0)):
        p.report_received(receive_report({
            "schema_version": 1, "proxy_id": proxy_id, "generated_at": 50.0,
            "load": {"inflight_total": held, "inflight_sampled_at": 50.0}}, clock.now))
    placed = p.pick()
    assert (placed.proxy_id, placed.basis) == ("b", Basis.REPORT)  # (0+1)/4 < (7+1)/8


def test_pools_known_only_from_the_summary_outlive_it_on_the_own_count() -> None:
    """No capacities configured: once the last summary is too old (a long outage) or a
    snapshot comes with no age to go by, each pool is ranked by this Scheduler's own
    count over the capacity it last had, never dropped as unknown."""
    clock = Clock()
    p = PoolPicker(rng=random.Random(0), clock=clock, summary_max_age_s=30.0)
    p.summary_received(snapshot(1000.0, a={"inflight_total": 8.0},
                                b={"inflight_total": 0.0}))
    clock.now += 40.0
    assert {p.pick().basis for _ in range(4)} == {Basis.OWN_COUNT}
    ageless = PoolPicker(rng=random.Random(0), clock=clock)
    ageless.summary_received(replace(snapshot(1000.0, b={"inflight_total": 0.0}),
                                     age_s=None))
    placed = ageless.pick()
    assert (placed.proxy_id, placed.basis) == ("b", Basis.OWN_COUNT)


def test_a_pool_last_seen_asleep_or_empty_stays_out_when_the_summary_is_too_old() -> None:
    clock = Clock()
    p = PoolPicker({"a": 8.0, "b": 8.0, "c": 8.0}, rng=random.Random(0), clock=clock)
    p.summary_received(snapshot(1000.0, a={"inflight_total": 0.0, "state": "asleep"},
                                b={"inflight_total": 7.0},
                                c={"inflight_total": 0.0, "capacity": 0.0}))
    assert picks(p, 3) == Counter(b=3)
    clock.now += 40.0  # the bridge went quiet: own counts only, a and c still out
    assert picks(p, 6) == Counter(b=6)


def test_a_pool_known_only_from_reports_is_forgotten_when_they_stop() -> None:
    clock = Clock()
    p = PoolPicker(clock=clock, report_max_age_s=3.0)
    p.report_received(report("g", 1.0, 4.0, at=50.0, received_at=clock.now))
    assert p.pick().proxy_id == "g"
    clock.now += 3.5
    with pytest.raises(NoDecision, match="no pool is known"):
        p.pick()


def test_what_pools_said_is_bounded_by_those_heard_lately() -> None:
    """Pools come and go, in the summary and by their reports (half of them with no
    inflight to measure), and the Scheduler places nothing meanwhile: what the picker
    holds is the summary's pools and those heard within report_max_age_s, not every
    pool that ever was."""
    clock = Clock()
    p = PoolPicker(clock=clock, report_max_age_s=3.0)
    for i in range(1000):
        p.summary_received(snapshot(clock.now, **{f"summed-{i}": {"inflight_total": 0.0}}))
        clock.now += 1.0
    assert set(p._said) == {"summed-999"}
    for i in range(1000):
        inflight = None if i % 2 else 1.0
        p.report_received(receive_report({
            "schema_version": 1, "proxy_id": f"pool-{i}", "generated_at": clock.now,
            "load": {"inflight_total": inflight, "capacity": 4.0,
                     "inflight_sampled_at": clock.now}}, clock.now))
        clock.now += 1.0
    assert len(p._said) <= 1 + 4 and len(p._reports) <= 4
    p.summary_received(snapshot(clock.now))
    clock.now += 3.5
    with pytest.raises(NoDecision, match="no pool is known"):
        p.pick()
    assert (p._said, p._reports) == ({}, {})


def test_a_pool_reporting_asleep_with_no_inflight_stays_out_while_it_reports() -> None:
    clock = Clock()
    p = PoolPicker({"a": 8.0, "b": 8.0}, rng=random.Random(0), clock=clock,
                   report_max_age_s=3.0)
    for _ in range(5):
        p.report_received(receive_report({
            "schema_version": 1, "proxy_id": "b", "generated_at": clock.now,
            "load": {"inflight_total": None, "inflight_sampled_at": clock.now},
            "health": {"pool_admission_state": "asleep"}}, clock.now))
        assert picks(p, 4) == Counter(a=4)
        clock.now += 1.0


def test_pools_deleted_from_the_summary_or_refusing_once_are_not_kept() -> None:
    """Every second a new pool appears in the summary, an old one leaves it, and each
    pool placed on refuses: the picker holds the summary's pools and the refusals of
    the last backoff."""
    clock = Clock()
    p = PoolPicker(rng=random.Random(0), clock=clock, refusal_backoff_s=5.0)
    for i in range(1000):
        p.summary_received(snapshot(clock.now, **{f"pool-{j}": {"inflight_total": 0.0}
                                                  for j in (i, i + 1)}))
        p.finished(p.pick(), refused=True)
        clock.now += 1.0
    assert set(p._said) == set(p._summary) == {"pool-999", "pool-1000"}
    assert len(p._refused_until) <= 6
