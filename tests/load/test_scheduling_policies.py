"""The closed loop's policies and outcome figures, on views and records made here."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping

import pytest

from bench.scheduling.loop import Lengths, Record, local_on_spans
from bench.scheduling.outcome import herding, outcome, percentile
from bench.scheduling.policies import POLICIES, Policy, View
from poolscope.scheduler_bridge.client import BridgeSnapshot, parse_pool

CAPACITIES = {"a": 8, "b": 4, "c": 2}
NOW = 1000.0


def snapshot(**loads: dict[str, float | None]) -> BridgeSnapshot:
    pools = {p: parse_pool({"schema_version": 1, "proxy_id": p, "generated_at": NOW,
                            "load": {"capacity": float(CAPACITIES[p]), **load}})
             for p, load in loads.items()}
    return BridgeSnapshot(generated_at=NOW, stale=False, age_s=2.0, pools=pools)


async def no_live() -> Mapping[str, float]:
    raise AssertionError("only the oracle reads the live state")


def view(snap: BridgeSnapshot | None, seed: int = 0, live: object = no_live
         ) -> tuple[BridgeSnapshot | None, View]:
    return snap, View(CAPACITIES, random.Random(seed), live)  # type: ignore[arg-type]


async def picks(name: str, held: tuple[BridgeSnapshot | None, View], n: int = 200
                ) -> Counter[str]:
    snap, v = held
    policy: Policy = POLICIES[name](CAPACITIES, 1, v.rng, lambda: NOW)
    if snap is not None:
        policy.summary_received(snap)
    return Counter([(await policy.place(v))[0] for _ in range(n)])


async def test_least_load_takes_the_lowest_ratio_and_skips_unknown() -> None:
    snap = snapshot(a={"load_ratio": 0.9}, b={"load_ratio": None}, c={"load_ratio": 0.5})
    assert await picks("least_load", view(snap)) == Counter(c=200)


async def test_nothing_known_falls_back_to_capacity_weights_never_to_a_zero() -> None:
    counts = await picks("least_load", view(snapshot(a={}, b={}, c={})), n=1400)
    assert counts["a"] > counts["b"] > counts["c"] > 0
    assert await picks("picker", view(snapshot(a={}, b={}, c={})), n=10) != Counter(c=10)


async def test_ties_are_broken_at_random_not_by_name() -> None:
    snap = snapshot(a={"load_ratio": 0.0}, b={"load_ratio": 0.0}, c={"load_ratio": 0.0})
    assert set(await picks("least_load", view(snap))) == {"a", "b", "c"}


async def test_the_oracle_ranks_by_what_the_pools_hold_now_over_capacity() -> None:
    async def live() -> Mapping[str, float]:
        return {"a": 7.0, "b": 2.0, "c": 0.0}
    # (7 + 1) / 8 = 1, (2 + 1) / 4 = 0.75, (0 + 1) / 2 = 0.5
    assert await picks("oracle", view(None, live=live), n=5) == Counter(c=5)


    async def c_unreported() -> Mapping[str, float | None]:
        return {"a": 7.0, "b": 2.0, "c": None}
    assert await picks("oracle", view(None, live=c_unreported), n=5) == Counter(b=5)


async def test_the_time_oracle_ranks_by_the_time_a_new_request_would_take() -> None:
    async def live() -> Mapping[str, float]:
        return {"a": 5.0, "b": 3.0, "c": 3.0}

    def times(measured: Mapping[str, float]) -> View:
        return View(CAPACITIES, random.Random(0), live, lambda: measured)

    async def chosen(measured: Mapping[str, float]) -> Counter[str]:
        policy = POLICIES["oracle_time"](CAPACITIES, 1, random.Random(0), lambda: NOW)
        return Counter([(await policy.place(times(measured)))[0] for _ in range(5)])

    # A slot free in a and b: a new request decodes at their token times (b's faster,
    # whatever share of a's slots is busy); c is full, (3 + 1) / 2 = 2 rounds of 0.008 s.
    assert await chosen({"a": 0.015, "b": 0.012, "c": 0.008}) == Counter(b=5)
    assert await chosen({"a": 0.010, "b": 0.012, "c": 0.008}) == Counter(a=5)
    # Not measured yet: taken at the slowest measured time, never as free.
    assert await chosen({"a": 0.020, "b": 0.030}) == Counter(a=5)


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


def test_the_default_sweep_runs_every_policy_at_70_and_the_headline_with_replicas() -> None:
    from bench.scheduling.__main__ import CORE_POLICIES, HEADLINE, parse_args, plans
    sim, llama = plans(parse_args([]))
    assert {c.policy for c in sim.cells if c.replicas == 1} == set(POLICIES)
    assert {c.policy for c in sim.cells if c.replicas == 3} == set(HEADLINE)
    assert {(c.policy, c.replicas) for c in llama.cells} == {
        (p, n) for p in HEADLINE for n in (1, 3)}
    # A policy that reads no summary runs with no interval or TTL.
    assert all((c.interval_s is None) == (c.ttl_s is None) == (not POLICIES[c.policy]
               .reads_summary) for c in (*sim.cells, *llama.cells))
    assert sim.monitored == llama.monitored == [(5.0, 1.0)]
    quick, = plans(parse_args(["--quick"]))
    assert (quick.backend, {c.policy for c in quick.cells}) == ("sim", set(CORE_POLICIES))


def test_the_grid_takes_replicas_offsets_an_outage_and_the_reporting_pools() -> None:
    from bench.scheduling.__main__ import parse_args, plans
    plan, = plans(parse_args(["--loads", "0.7", "--policies", "weighted,picker_heartbeat",
                              "--replicas", "1,3",
                              "--offsets=-0.5,0.5", "--outage", "10,20",
                              "--reporting", "pool-a,pool-c"]))
    picker = [c for c in plan.cells if c.policy == "picker_heartbeat"]
    assert {(c.replicas, c.offset_s) for c in picker} == {
        (n, o) for n in (1, 3) for o in (-0.5, 0.5)}
    assert all(c.outage == (10.0, 20.0) and c.reporting == ("pool-a", "pool-c")
               for c in picker)
    # No bridge to stop for a policy that reads none.
    assert all(c.outage is None for c in plan.cells if c.policy == "weighted")
