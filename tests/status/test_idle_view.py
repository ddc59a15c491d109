"""What can I stop, as a view model: which Instances it nominates, which it keeps apart,
and the cards it counts, from the series the exporters publish (tests/proxy_bridge/
pool_data.py) and the pools' lines (tests/status/fleet.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from harness.canned_prometheus import Series, series
from poolscope.bridge.summary import parse_value
from poolscope.contract import catalog as c
from poolscope.contract.thresholds import IDLE_S
from poolscope.scheduler_bridge.status.idle_view import (
    HeldGpus,
    IdleView,
    build_idle_view,
    by_pool,
    parse_idle_view,
)
from poolscope.scheduler_bridge.status.pool_view import InstanceGpus
from tests.proxy_bridge.pool_data import Inst, raw_series
from tests.status.fleet import GIB, H100, field_series, gpu_series
from tests.status.test_view import view_of

L4 = "NVIDIA L4"
AT = 1_700_000_000.0


def pool_line(pid: str, idle: int | None, unknown: int | None, **gpus: str) -> list[Series]:
    """A pool's summary: its idle counts (None: not measured) and its H100 capacity."""
    out = [field_series(pid, "instances.total", "4")]
    out += [field_series(pid, path, str(n)) for path, n in
            (("instances.idle", idle), ("instances.idle_unknown", unknown)) if n is not None]
    if gpus:
        out += gpu_series(pid, H100, gpus["healthy"], gpus["unhealthy"], str(80 * GIB),
                          used=gpus["used"])
    return out


def idle_view(lines: list[Series], members: dict[str, list[Inst]],
              extra: Sequence[Series] = ()) -> IdleView:
    raw = [*(s for pid, insts in members.items() for s in raw_series(pid, insts)), *extra]
    return build_idle_view(view_of(lines), by_pool((m, parse_value(v)) for m, v in raw), AT)


FLEET = {"p": [
    Inst("long", idle_s=7200.0, gpus=4, unhealthy_gpus=1, gpu_model=H100),
    Inst("short", idle_s=IDLE_S + 1, gpus=2, gpu_model=L4),
    Inst("busy", idle_s=12.0, gpus=4, gpu_model=H100),
    Inst("new", idle_s=None, gpus=4, gpu_model=H100),
    Inst("cpu", idle_s=900.0, gpus=None),
]}


def fleet_view() -> IdleView:
    return idle_view(pool_line("p", 3, 1, healthy="11", unhealthy="1", used="4"), FLEET)


def test_the_idle_instances_longest_first_with_the_cards_each_holds() -> None:
    (pool,) = fleet_view().pools
    assert [(i.instance_id, i.idle_s) for i in pool.idle_instances] == [
        ("long", 7200.0), ("cpu", 900.0), ("short", IDLE_S + 1)]
    long, cpu, short = pool.idle_instances
    assert long.gpus == (InstanceGpus(H100, 3, 1),) and long.alive is True
    assert short.gpus == (InstanceGpus(L4, 2, 0),)
    assert cpu.gpus is None  # no GPU data, not zero GPUs
    assert pool.agrees


def test_the_cards_idle_instances_hold_per_model_beside_the_capacity() -> None:
    held = {g.model: g for g in fleet_view().gpu_models}
    # All four H100 of "long" (its unhealthy one goes with it), none of "busy"'s.
    assert held[H100] == HeldGpus(H100, total=12, used=4.0, free=7.0, unhealthy=1,
                                  idle=4, idle_unknown=4)
    # A model the pools' lines do not list: its capacity unknown, its cards counted.
    assert held[L4] == HeldGpus(L4, None, None, None, None, idle=2, idle_unknown=0)


def test_never_dispatched_is_unknown_never_idle() -> None:
    (pool,) = fleet_view().pools
    assert [i.instance_id for i in pool.unknown_instances] == ["new"]
    assert "new" not in {i.instance_id for i in pool.idle_instances}


def test_a_restarted_proxy_nominates_nothing() -> None:
    restarted = {"p": [Inst(i.id, idle_s=None, gpus=i.gpus, gpu_model=i.gpu_model)
                       for i in FLEET["p"]]}
    view = idle_view(pool_line("p", 0, 5), restarted)
    assert view.idle_instances == [] and len(view.unknown_instances) == 5
    assert all(g.idle == 0 for g in view.gpu_models)
    assert {g.model: g.idle_unknown for g in view.gpu_models} == {H100: 12, L4: 2}


def test_the_threshold_is_strict_as_the_proxy_counts() -> None:
    view = idle_view(pool_line("p", 0, 0), {"p": [Inst("edge", idle_s=IDLE_S)]})
    assert view.idle_instances == [] and view.pools[0].agrees


def test_a_pool_that_does_not_measure_idleness_lists_nobody() -> None:
    # A gateway's Instances: registered at their Proxy-side source, no idle count.
    view = idle_view(pool_line("gw", None, None), {"gw": [Inst("e", idle_s=None)]})
    assert view.pools == () and view.unmeasured == ("gw",)
    assert view.unknown_instances == []


def test_rows_that_differ_from_the_counts_say_so() -> None:
    view = idle_view(pool_line("p", 2, 1), {"p": [Inst("a", idle_s=900.0)]})
    assert not view.pools[0].agrees
    (note,) = view.disagreements()
    assert note.startswith("p: the summary counts 2 idle and 1 idle unknown, the Instances "
                           "read 1 and 0")


def test_an_unreadable_gpu_count_is_no_gpu_data() -> None:
    # Two scrapes of one exporter that disagree on its healthy H100s.
    twice = series(c.INSTANCE_GPUS.name, "p", "3", "nvml", instance_id="a", gpu_model="H100",
                   health="healthy", job="other")
    view = idle_view(pool_line("p", 1, 0), {"p": [Inst("a", idle_s=900.0, gpus=4)]}, [twice])
    assert view.idle_instances[0].gpus is None
    assert all(g.idle == 0 for g in view.gpu_models)


def test_the_json_reads_back_as_the_same_view() -> None:
    view = fleet_view()
    assert parse_idle_view(json.loads(json.dumps(view.as_dict()))) == view
