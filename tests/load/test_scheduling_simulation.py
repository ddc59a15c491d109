"""bench.scheduling.simulate: the closed loop as a discrete-event model driving the
loop's policy objects (the product's PoolPicker among them), run small. Nothing here
times anything: the figures belong to the benchmark."""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from bench.scheduling.policies import Picker
from bench.scheduling.sim_engine import Result, simulate
from bench.scheduling.sim_workload import Scenario, Workload, draw
from bench.scheduling.simulate import Row, main, run_scenario
from poolscope.scheduler_bridge.picker import Basis

LOOP_CELL = Scenario()  # the loop's: 3 pools, 70 %, 5 s, ttl 1, local traffic, 30 s


def rows(scenario: Scenario, *policies: str) -> dict[str, Row]:
    return {r.policy: r for r in run_scenario(scenario, policies)}


def scheduled(workload: Workload) -> int:
    """The Scheduler's requests (the rest is local traffic)."""
    return sum(1 for r in workload.replica if r >= 0)


def bases(result: Result) -> Counter[Basis]:
    placed: Counter[Basis] = Counter()
    for replica in result.replicas:
        assert isinstance(replica, Picker)
        placed += replica.picker.stats.placed
    return placed


def test_a_seed_draws_the_same_scenario_and_every_policy_meets_it() -> None:
    scenario = replace(LOOP_CELL, replicas=3)
    first, again = draw(scenario), draw(scenario)
    assert first == again
    assert draw(replace(scenario, seed=2)).times != first.times
    # The picker's own randomness is seeded too: the same latencies, request by request.
    assert simulate(scenario, first, "picker").latency == simulate(scenario, again,
                                                                   "picker").latency
    counts = {r.policy: r.requests for r in run_scenario(scenario, ("oracle", "weighted"))}
    assert counts["oracle"] == counts["weighted"] == scheduled(first)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_oracle_waits_no_longer_than_capacity_weights(seed: int) -> None:
    got = rows(replace(LOOP_CELL, seed=seed), "oracle", "weighted")
    assert got["oracle"].queue_wait_mean <= got["weighted"].queue_wait_mean
    assert got["oracle"].queue_wait_p99 <= got["weighted"].queue_wait_p99
    assert got["oracle"].mean_over_oracle == 1.0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_least_load_herds_where_the_picker_does_not(seed: int) -> None:
    got = rows(replace(LOOP_CELL, seed=seed), "least_load", "picker")
    assert got["least_load"].latency_mean > got["picker"].latency_mean


def test_the_picker_places_on_reports_when_heartbeats_come_on_the_summary_when_not(
        ) -> None:
    scenario = replace(LOOP_CELL, replicas=3)
    workload = draw(scenario)
    with_reports = bases(simulate(scenario, workload, "picker_heartbeat"))
    assert set(with_reports) == {Basis.REPORT}
    assert set(bases(simulate(scenario, workload, "picker"))) == {Basis.SUMMARY}
    silent = replace(scenario, mixed=0.0)
    assert set(bases(simulate(silent, draw(silent), "picker_heartbeat"))) == {Basis.SUMMARY}
    half = replace(scenario, pools=10, mixed=0.5)
    assert set(bases(simulate(half, draw(half), "picker_heartbeat"))) == {
        Basis.REPORT, Basis.SUMMARY}


def test_through_a_bridge_outage_the_picker_falls_back_and_loses_no_request() -> None:
    scenario = replace(LOOP_CELL, replicas=3, duration_s=80.0, outage=(10.0, 50.0))
    workload = draw(scenario)
    result = simulate(scenario, workload, "picker")
    assert set(bases(result)) == {Basis.SUMMARY, Basis.OWN_COUNT}
    assert len(result.latency) == scheduled(workload)
    assert all(math.isfinite(x) for x in result.latency)
    for replica in result.replicas:
        assert isinstance(replica, Picker)
        assert replica.picker.stats.bridge_errors > 0
        # Every request it placed was finished.
        assert all(replica.picker.own.mine_now(p) == 0 for p in workload.names)


def test_each_replica_has_its_own_picker_and_sees_only_its_requests() -> None:
    scenario = replace(LOOP_CELL, replicas=3)
    workload = draw(scenario)
    result = simulate(scenario, workload, "picker")
    pickers = [r.picker for r in result.replicas if isinstance(r, Picker)]
    assert len({id(p) for p in pickers}) == 3
    sent = Counter(r for r in workload.replica if r >= 0)
    assert [sum(p.stats.placed.values()) for p in pickers] == [sent[r] for r in range(3)]
    assert all(p.replicas == 3 for p in pickers)
    alone = simulate(scenario, workload, "picker", unaware=True)
    assert all(r.picker.replicas == 1 for r in alone.replicas if isinstance(r, Picker))


def test_a_skewed_scheduler_clock_changes_no_decision() -> None:
    """Every instant of another host is anchored on the replica's own clock."""
    scenario = replace(LOOP_CELL, replicas=3)
    workload = draw(scenario)
    skewed = replace(scenario, clock_offset_s=-7.5)
    for policy in ("picker", "picker_heartbeat"):
        assert (simulate(scenario, workload, policy).latency
                == simulate(skewed, workload, policy).latency)


def test_the_command_prints_a_row_per_policy_and_writes_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "rows.json"
    assert main(["--pools", "6", "--replicas", "1,2", "--duration", "10", "--policies",
                 "oracle,picker", "--unaware", "--json", str(out)]) == 0
    printed = [line for line in capsys.readouterr().out.splitlines()
               if not line.startswith(("#", "pools"))]
    # picker:unaware only where there is more than one replica.
    assert [line.split()[3] for line in printed] == [
        "oracle", "picker", "oracle", "picker", "picker:unaware"]
    assert [r["policy"] for r in json.loads(out.read_text())][-1] == "picker:unaware"
