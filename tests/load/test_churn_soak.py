"""bench.churn_soak, run short: two minutes of a churning fleet (rollouts, crashes, a pool
created and deleted, a router's model loaded and unloaded where llama.cpp's server is
built), every component flat after warm-up, the crashed members forgotten. The verdict
itself is shown to fail a figure that grows with the members that ever existed, and
the flags to refuse what would leave no window to compare. The short run's windows are
times into the run, so it runs `alone`; the ten-minute run's figures are in
docs/benchmarks.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.churn.probe import ANSWER, FDS, HEAD_SERIES, RSS, SERIES, Sample
from bench.churn.report import failures
from bench.churn.soak import Settings, run
from bench.churn.verdict import FLEET, MEMBERS_ALIVE, MEMBERS_EVER, judge
from bench.churn_soak import parse_args
from harness import llama_server
from tests.support.flags import refused

pytestmark = pytest.mark.integration

SHORT = Settings(duration_s=120.0, rollout_period_s=20.0, crashes=2, pool_churn_period_s=30.0,
                 sample_period_s=3.0, heartbeat_timeout_s=2.0, forget_after_s=8.0,
                 tsdb_block_s=20.0, pools=2, instances=2,
                 router_models=1 if llama_server.server_dir() else 0, model_period_s=20.0,
                 rate=2.0)


# Seventy-odd processes started over two minutes, and their figures judged against a
# warm-up window: with the two cores to itself (`make test` runs `alone` tests last).
@pytest.mark.alone
def test_a_short_soak_stays_flat_and_forgets_the_crashed(tmp_path: Path) -> None:
    result = run(SHORT, tmp_path)
    verdict = result.verdict
    assert verdict.passed, failures(verdict)
    sampled = {(f.component, f.figure) for f in verdict.figures}
    expected = {("prometheus", HEAD_SERIES), ("scheduler-bridge", ANSWER),
                ("proxy-bridge-pool-1", ANSWER), ("proxy-bridge-pool-2", ANSWER),
                *((c, figure) for c in ("prometheus", "scheduler-bridge", "proxy-pool-1",
                                        "proxy-pool-2", "proxy-bridge-pool-1",
                                        "instance-exporters")
                  for figure in (RSS, FDS, SERIES))}
    if SHORT.router_models:
        expected |= {("model-exporters", figure) for figure in (RSS, FDS, SERIES)}
        assert result.events["model"] >= 2  # loaded, then unloaded
    assert expected <= sampled
    assert all(f.warmup is not None and f.end is not None for f in verdict.judged)
    # The Proxy bridges list a departed member for MEMBER_MEMORY (5 min), longer than
    # two minutes can show flat: recorded, not judged. Every other figure is judged.
    assert {(f.component, f.figure) for f in verdict.figures if not f.judged} == {
        ("proxy-bridge-pool-1", ANSWER), ("proxy-bridge-pool-2", ANSWER)}
    # The fleet churned: far more members existed than are alive, between the windows too.
    ever, alive = verdict.fleet_figure(MEMBERS_EVER), verdict.fleet_figure(MEMBERS_ALIVE)
    assert ever.end is not None and alive.end is not None
    assert ever.ratio > 1.5 and ever.end > 3 * alive.end
    assert result.first_rollout_s is not None
    assert result.events["pool"] >= 3 and result.events["rollout"] >= 12
    # Each crashed member was forgotten by its Proxy (a member replaced whose deregistration
    # was lost is forgotten too), which lists about the living, not every member that was.
    assert len(result.crashed) == SHORT.crashes
    assert sum(result.forgotten.values()) >= SHORT.crashes
    assert all(0 < n <= SHORT.instances + 1 for n in result.listed.values()), result.listed


def _samples(grow: bool) -> list[Sample]:
    """A fleet whose members ever grow by one a second, and a figure that is flat or
    keeps 10 units of each member that ever existed."""
    samples = []
    for t in range(0, 101, 2):
        ever = 6 + t
        samples += [Sample(t, FLEET, MEMBERS_EVER, ever), Sample(t, FLEET, MEMBERS_ALIVE, 6),
                    Sample(t, "proxy-pool-1", SERIES, 60 + (10 * ever if grow else t % 3))]
    return samples


@pytest.mark.parametrize("grow", [False, True])
def test_the_verdict_fails_a_figure_that_grows_with_the_members_ever(grow: bool) -> None:
    verdict = judge(_samples(grow), 20, 100, bound=1.5)
    assert verdict.passed is not grow
    lines = failures(verdict)
    if grow:
        assert len(lines) == 1 and lines[0].startswith("FAIL: proxy-pool-1 series grew")
        assert "members ever grew" in lines[0]
    else:
        assert lines == []


@pytest.mark.parametrize(("argv", "flag"), [
    (["--duration", "0"], "--duration"),
    (["--crashes", "-1"], "--crashes"),
    (["--forget-after", "2", "--heartbeat-timeout", "3"], "--forget-after"),
    (["--sample-period", "100"], "--sample-period"),
    (["--duration", "100"], "--duration"),
    (["--rollout-period", "soon"], "--rollout-period"),
])
def test_a_bad_flag_exits_2_naming_it(argv: list[str], flag: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert f"argument {flag}:" in refused(parse_args, argv, capsys)


@pytest.mark.parametrize(("memory_s", "judged"), [(40.0, True), (70.0, False)])
def test_a_figure_with_a_longer_memory_warms_up_later_or_is_not_judged(
        memory_s: float, judged: bool) -> None:
    verdict = judge(_samples(grow=True), 20, 100, bound=1.5,
                    memory_s=lambda component, figure: memory_s)
    [figure] = verdict.figures
    assert figure.windows.warmup_from == memory_s
    assert figure.judged is judged
    # It grows: judged, it fails; not judged, nothing was, which fails too.
    [line] = failures(verdict)
    assert line.startswith("FAIL: proxy-pool-1 series grew" if judged
                           else "FAIL: no figure was judged")
