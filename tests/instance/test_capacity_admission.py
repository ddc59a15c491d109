"""Capacity (configured or learned) and the admission state set."""

from __future__ import annotations

import pytest

from poolscope.contract import catalog
from poolscope.exporters.instance.admission import (
    AdmissionInputs,
    AdmissionState,
    AdmissionThresholds,
    decide,
)
from poolscope.exporters.instance.capacity import Capacity
from poolscope.exporters.instance.engine import EngineSample
from tests.instance.conftest import EngineServer, MakeExporter, fixture_text, labels

TH = AdmissionThresholds()


def engine(running: float | None) -> EngineSample:
    return EngineSample("vllm", running, 0, 0.1, 0.1, None, None, None)


def test_learned_capacity_is_the_high_water_mark_and_absent_before_any_load() -> None:
    capacity = Capacity()
    assert capacity.current() is None
    capacity.observe(engine(0))
    capacity.observe(engine(None))
    assert capacity.current() is None  # 0 running says nothing about capacity
    for running in (3, 9, 4):
        capacity.observe(engine(running))
    assert capacity.current() == (9, "learned")


def test_configured_capacity_wins() -> None:
    capacity = Capacity(16)
    capacity.observe(engine(40))
    assert capacity.current() == (16, "configured")
    with pytest.raises(ValueError):
        Capacity(-1)


async def test_capacity_series_sources(engine_server: EngineServer,
                                       make_exporter: MakeExporter) -> None:
    engine_server.body = fixture_text("vllm")
    exporter, registry = make_exporter(engine_metrics_url=engine_server.url)
    assert registry.get_sample_value("poolscope_instance_capacity_requests",
                                     labels("learned")) is None
    await exporter.loop.sample_all()
    assert registry.get_sample_value("poolscope_instance_capacity_requests",
                                     labels("learned")) == 37
    _, registry2 = make_exporter(capacity=64)
    assert registry2.get_sample_value("poolscope_instance_capacity_requests",
                                      labels("configured")) == 64


@pytest.mark.parametrize(("kv", "waiting", "free", "state"), [
    (0.2, 0, 0.5, AdmissionState.ACCEPTING),
    (0.86, 0, 0.5, AdmissionState.DEGRADED),
    (0.2, 1, 0.5, AdmissionState.DEGRADED),
    (0.2, 0, 0.08, AdmissionState.DEGRADED),
    (0.96, 0, 0.5, AdmissionState.SATURATED),
    (0.2, 8, 0.5, AdmissionState.SATURATED),
    (0.86, 0, 0.04, AdmissionState.SATURATED),  # the worst input wins
    (None, 0, 0.5, AdmissionState.ACCEPTING),   # TGI: no KV gauge, queue measured
    (None, None, 0.5, AdmissionState.UNKNOWN),  # engine unreadable: not accepting
    (None, None, None, AdmissionState.UNKNOWN),
    (None, None, 0.01, AdmissionState.SATURATED),  # a measured bad signal still counts
])
def test_admission_decision(kv: float | None, waiting: float | None, free: float | None,
                            state: AdmissionState) -> None:
    assert decide(AdmissionInputs(kv, waiting, free), TH, draining=False) is state


def test_draining_overrides_everything() -> None:
    assert decide(AdmissionInputs(0.99, 100, 0.0), TH, draining=True) is AdmissionState.DRAINING


def test_thresholds_must_be_ordered() -> None:
    with pytest.raises(ValueError):
        AdmissionThresholds(kv_degraded=0.9, kv_saturated=0.8)
    with pytest.raises(ValueError):
        AdmissionThresholds(memory_degraded=0.01, memory_saturated=0.05)


async def test_admission_is_a_state_set(engine_server: EngineServer,
                                        make_exporter: MakeExporter) -> None:
    engine_server.body = fixture_text("vllm")  # 12 waiting: saturated by default
    exporter, registry = make_exporter(engine_metrics_url=engine_server.url)

    def states() -> dict[str, float | None]:
        return {s.value: registry.get_sample_value("poolscope_instance_admission_state",
                                                   labels("derived", state=s.value))
                for s in AdmissionState}

    def level() -> float | None:
        return registry.get_sample_value("poolscope_instance_admission_level",
                                         labels("derived"))

    assert states() == {**dict.fromkeys(map(str, AdmissionState), 0.0), "unknown": 1.0}
    assert level() == 0.0  # unknown: the lowest level, so any known state outranks it
    await exporter.loop.sample_all()
    assert states() == {**dict.fromkeys(map(str, AdmissionState), 0.0), "saturated": 1.0}
    assert level() == 3.0
    exporter.admission.draining = True
    assert states()["draining"] == 1.0 and sum(v or 0 for v in states().values()) == 1
    assert level() == 1.0


def test_admission_levels_order_the_states_best_first() -> None:
    """The pool's state is the max level over its members: the best any offers."""
    ranked = sorted(catalog.ADMISSION_LEVELS, key=catalog.ADMISSION_LEVELS.__getitem__,
                    reverse=True)
    assert ranked == ["accepting", "degraded", "saturated", "asleep", "draining", "unknown"]
