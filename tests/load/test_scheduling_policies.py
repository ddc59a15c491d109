"""The closed loop's policies and outcome figures, on views and records made here."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping

import pytest

from bench.scheduling.loop import Lengths, Record, local_on_spans
from bench.scheduling.outcome import herding, outcome, percentile
from bench.scheduling.policies import POLICIES, View
from poolscope.scheduler_bridge.client import BridgeSnapshot, parse_pool
from poolscope.scheduler_bridge.own_requests import OwnRequests

CAPACITIES = {"a": 8, "b": 4, "c": 2}
NOW = 1000.0


def snapshot(**loads: dict[str, float | None]) -> BridgeSnapshot:
    pools = {p: parse_pool({"schema_version": 1, "proxy_id": p, "generated_at": NOW,
                            "load": {"capacity": float(CAPACITIES[p]), **load}})
             for p, load in loads.items()}
    return BridgeSnapshot(generated_at=NOW, stale=False, age_s=2.0, pools=pools)


async def no_live() -> Mapping[str, float]:
    raise AssertionError("only the oracle reads the live state")


def view(snap: BridgeSnapshot | None, own: OwnRequests | None = None, seed: int = 0,
         live: object = no_live) -> View:
    return View(CAPACITIES, snap, NOW, own or OwnRequests(clock=lambda: NOW),
                random.Random(seed), live)  # type: ignore[arg-type]


async def picks(name: str, v: View, n: int = 200) -> Counter[str]:
    policy = POLICIES[name]()
    return Counter([await policy.choose(v) for _ in range(n)])


async def test_least_load_takes_the_lowest_ratio_and_skips_unknown() -> None:
    snap = snapshot(a={"load_ratio": 0.9}, b={"load_ratio": None}, c={"load_ratio": 0.5})
    assert await picks("least_load", view(snap)) == Counter(c=200)


async def test_nothing_known_falls_back_to_capacity_weights_never_to_a_zero() -> None:
    counts = await picks("least_load", view(snapshot(a={}, b={}, c={})), n=1400)
    assert counts["a"] > counts["b"] > counts["c"] > 0
    assert await picks("tracked", view(None), n=10) != Counter(c=10)


async def test_ties_are_broken_at_random_not_by_name() -> None:
    snap = snapshot(a={"load_ratio": 0.0}, b={"load_ratio": 0.0}, c={"load_ratio": 0.0})
    assert set(await picks("least_load", view(snap))) == {"a", "b", "c"}


async def test_tracked_replaces_the_summarys_view_of_my_requests_by_mine_now() -> None:
    """The summary saw pool a full of my requests; they have all finished since, so a is
    the emptiest pool now, though least_load, reading the same summary, avoids it."""
    clock = [NOW - 10]
    own = OwnRequests(clock=lambda: clock[0])
    for _ in range(8):
        own.sent("a")
    clock[0] = NOW - 1
    for _ in range(8):
        own.finished("a")
    clock[0] = NOW
    snap = snapshot(a={"inflight_total": 8.0, "load_ratio": 1.0, "inflight_sampled_at": NOW - 5},
                    b={"inflight_total": 1.0, "load_ratio": 0.25, "inflight_sampled_at": NOW - 5},
                    c={"inflight_total": 1.0, "load_ratio": 0.5, "inflight_sampled_at": NOW - 5})
    assert await picks("tracked", view(snap, own), n=20) == Counter(a=20)
    assert await picks("least_load", view(snap, own), n=20) == Counter(b=20)


async def test_tracked_at_evaluation_uses_the_rules_time_not_the_scrape() -> None:
    """Mine in pool a rose from 0 to 4 between the scrape (which saw 4 of others') and the
    rules' evaluation: at the scrape's time a holds 4 + 4 now; at the evaluation's, only
    the 4 that are mine."""
    clock = [NOW - 5]
    own = OwnRequests(clock=lambda: clock[0])
    clock[0] = NOW - 3
    for _ in range(4):
        own.sent("a")
    clock[0] = NOW
    snap = snapshot(a={"inflight_total": 4.0, "inflight_sampled_at": NOW - 4},
                    b={"inflight_total": 2.0, "inflight_sampled_at": NOW - 4},
                    c={"inflight_total": 0.0, "inflight_sampled_at": NOW - 4})
    # received at NOW with age 2: evaluated at NOW - 2. a: (4 - 0 + 4 + 1) / 8 = 1.125 at
    # the scrape; (max(0, 4 - 4) + 4 + 1) / 8 = 0.625 at the evaluation. b: 0.75, c: 0.5.
    assert await picks("tracked", view(snap, own), n=5) == Counter(c=5)
    snap_c_busy = snapshot(a={"inflight_total": 4.0, "inflight_sampled_at": NOW - 4},
                           b={"inflight_total": 2.0, "inflight_sampled_at": NOW - 4},
                           c={"inflight_total": 1.0, "inflight_sampled_at": NOW - 4})
    assert await picks("tracked", view(snap_c_busy, own), n=5) == Counter(b=5)
    assert await picks("tracked_eval", view(snap_c_busy, own), n=5) == Counter(a=5)


async def test_the_oracle_ranks_by_what_the_pools_hold_now_over_capacity() -> None:
    async def live() -> Mapping[str, float]:
        return {"a": 7.0, "b": 2.0, "c": 0.0}
    # (7 + 1) / 8 = 1, (2 + 1) / 4 = 0.75, (0 + 1) / 2 = 0.5
    assert await picks("oracle", view(None, live=live), n=5) == Counter(c=5)


    async def c_unreported() -> Mapping[str, float | None]:
        return {"a": 7.0, "b": 2.0, "c": None}
    assert await picks("oracle", view(None, live=c_unreported), n=5) == Counter(b=5)


def test_percentile_is_nearest_rank() -> None:
    values = list(range(1, 101))
    assert [percentile(values, q) for q in (50, 95, 99, 100)] == [50, 95, 99, 100]
    assert percentile([3.0], 99) == 3.0


def test_herding_is_one_when_decisions_follow_capacity() -> None:
    fair = [Record(t * 0.1, p, False) for t, p in enumerate(("a",) * 4 + ("b",) * 2 + ("c",))]
    assert herding(fair, {"a": 4, "b": 2, "c": 1}) == pytest.approx(1.0)
    herd = [Record(t * 0.1, "c", False) for t in range(10)]
    assert herding(herd, {"a": 4, "b": 2, "c": 1}) == pytest.approx(7.0)


def test_outcome_subtracts_each_request_its_own_decode_time() -> None:
    lengths = Lengths(10, 100, service_s=(0.6, 5.1), decode_s=(0.5, 5.0))
    records = [Record(0.0, "a", False, 200, first_token=0.1, end=0.6),
               Record(1.0, "a", True, 200, first_token=3.1, end=8.1),
               Record(2.0, "b", False, 503)]
    o = outcome(records, lengths, {"a": 1, "b": 1})
    assert (o.requests, o.refused) == (3, 1)
    assert o.queue_wait[0] == pytest.approx((0.1 + 2.1) / 2)
    assert o.queued_share == pytest.approx(0.5)  # the long one waited 2 s for its first token
    assert o.latency[0] == pytest.approx((0.6 + 7.1) / 2)


def test_local_traffic_is_on_then_flips_every_ten_seconds() -> None:
    assert local_on_spans(60) == [(0.0, 20.0), (30.0, 40.0), (50.0, 60.0)]


def test_the_default_sweep_runs_every_policy_at_70_and_the_core_ones_around_it() -> None:
    from bench.scheduling.__main__ import CORE_POLICIES, parse_args, plans
    sim, llama = plans(parse_args([]))
    at_70 = {c.policy for c in sim.cells if c.load == 0.7}
    assert at_70 == set(POLICIES)
    assert {c.policy for c in sim.cells if c.load != 0.7} == set(CORE_POLICIES)
    assert {c.policy for c in sim.cells if c.arrivals == "bursty"} == set(CORE_POLICIES)
    # A policy that reads no summary runs once per load, with no interval or TTL.
    assert all((c.interval_s is None) == (c.ttl_s is None) == (not POLICIES[c.policy]
               .reads_summary) for c in (*sim.cells, *llama.cells))
    assert sim.monitored == [(5.0, 1.0), (2.0, 1.0), (1.0, 1.0)]
    assert llama.monitored == [(5.0, 1.0)]
    quick, = plans(parse_args(["--quick"]))
    assert (quick.backend, {c.policy for c in quick.cells}) == ("sim", set(CORE_POLICIES))


async def test_heartbeat_ranks_by_the_proxies_reports_and_skips_a_missed_one() -> None:
    def report(p: str, inflight: float) -> object:
        return parse_pool({"schema_version": 1, "proxy_id": p, "generated_at": NOW,
                           "load": {"capacity": float(CAPACITIES[p]), "inflight_total": inflight,
                                    "ready_queue_depth": 0.0, "inflight_sampled_at": NOW}})
    v = view(None)
    v.reports = {"a": report("a", 8.0), "b": report("b", 1.0)}  # c missed its heartbeat
    assert await picks("heartbeat", v, n=10) == Counter(b=10)
