"""A sleeping engine is not free capacity: vLLM's sleep mode on the Instance exporter.

vLLM asleep answers /metrics with 0 running, 0 waiting and an empty KV cache, which
alone reads as an idle, accepting replica with all its capacity free. Its
`vllm:engine_sleep_state{sleep_state="awake"}` says otherwise; the fixtures
(tests/fixtures/engines/vllm_awake.txt, vllm_asleep.txt) carry the family as vLLM's
PrometheusStatLogger defines it.
"""

from __future__ import annotations

import pytest

from poolscope.contract import catalog
from poolscope.exporters.common.health import ErrorReason
from poolscope.exporters.common.sampling import SampleError
from poolscope.exporters.instance.admission import (
    AdmissionInputs,
    AdmissionState,
    AdmissionThresholds,
    decide,
)
from poolscope.exporters.instance.engine import interpret
from poolscope.exporters.instance.engines import MAPPINGS, VLLM
from tests.instance.conftest import EngineServer, MakeExporter, fixture_text, labels

AWAKE_RANK_1 = ('vllm:engine_sleep_state{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct",'
                'sleep_state="awake"} ')


def test_a_page_without_sleep_state_says_nothing_about_sleep() -> None:
    """Older vLLM and every other engine: unknown, never read as awake."""
    assert interpret(fixture_text("vllm_dp"), VLLM).asleep is None
    for name, engine in (("sglang", "sglang"), ("tgi", "tgi"), ("llamacpp", "llamacpp")):
        assert interpret(fixture_text(name), MAPPINGS[engine]).asleep is None


def test_an_awake_engine_reads_its_load_as_before() -> None:
    sample = interpret(fixture_text("vllm_awake"), VLLM)
    assert sample.asleep is False
    assert (sample.running, sample.waiting) == (42, 3)


def test_an_asleep_engine_reads_asleep_beside_its_zeros() -> None:
    sample = interpret(fixture_text("vllm_asleep"), VLLM)
    assert sample.asleep is True
    assert (sample.running, sample.waiting, sample.kv_cache_usage) == (0, 0, 0)


def test_one_sleeping_rank_makes_the_instance_asleep() -> None:
    """vLLM sets every rank of one front-end at once; a page with mixed ranks (say, two
    front-ends' pages merged) still holds a rank that refuses its requests."""
    page = fixture_text("vllm_awake").replace(AWAKE_RANK_1 + "1.0", AWAKE_RANK_1 + "0.0")
    assert page != fixture_text("vllm_awake")
    assert interpret(page, VLLM).asleep is True


@pytest.mark.parametrize("value", ["2.0", "0.5", "NaN", "-1.0"])
def test_an_awake_flag_other_than_0_or_1_fails_the_sample(value: str) -> None:
    page = fixture_text("vllm_awake").replace(AWAKE_RANK_1 + "1.0", AWAKE_RANK_1 + value)
    with pytest.raises(SampleError) as failed:
        interpret(page, VLLM)
    assert failed.value.reason is ErrorReason.INVALID_VALUE


TH = AdmissionThresholds()


@pytest.mark.parametrize(("kv", "waiting", "free"), [
    (0.0, 0.0, 0.5),  # what an asleep vLLM reads: accepting, were it not asleep
    (0.99, 100.0, 0.01),  # no threshold vote outranks it
    (None, None, None),
])
def test_asleep_is_its_own_admission_state(kv: float | None, waiting: float | None,
                                           free: float | None) -> None:
    inputs = AdmissionInputs(kv, waiting, free, asleep=True)
    assert decide(inputs, TH, draining=False) is AdmissionState.ASLEEP
    assert decide(inputs, TH, draining=True) is AdmissionState.DRAINING


def test_awake_or_unknown_sleep_changes_nothing() -> None:
    for asleep in (False, None):
        assert decide(AdmissionInputs(0.0, 0.0, 0.5, asleep=asleep), TH,
                      draining=False) is AdmissionState.ACCEPTING


def test_asleep_ranks_below_what_serves_and_above_draining() -> None:
    levels = catalog.ADMISSION_LEVELS
    assert levels["saturated"] > levels["asleep"] > levels["draining"] > levels["unknown"]


@pytest.mark.parametrize("configured", [None, 64])
async def test_an_asleep_instance_publishes_asleep_and_no_capacity(
        engine_server: EngineServer, make_exporter: MakeExporter,
        configured: int | None) -> None:
    """Configured or learned, an asleep engine offers no capacity; woken, it does again."""
    engine_server.body = fixture_text("vllm_awake")
    exporter, registry = make_exporter(engine_metrics_url=engine_server.url,
                                       capacity=configured)

    def state(name: str) -> float | None:
        return registry.get_sample_value("poolscope_instance_admission_state",
                                         labels("derived", state=name))

    def capacity() -> float | None:
        source = "configured" if configured else "learned"
        return registry.get_sample_value("poolscope_instance_capacity_requests",
                                         labels(source))

    await exporter.loop.sample_all()
    assert state("asleep") == 0.0
    assert capacity() == (configured or 42)

    engine_server.body = fixture_text("vllm_asleep")
    await exporter.loop.sample_all()
    assert state("asleep") == 1.0 and state("accepting") == 0.0
    assert registry.get_sample_value("poolscope_instance_admission_level",
                                     labels("derived")) == catalog.ADMISSION_LEVELS["asleep"]
    assert capacity() is None
    # The engine series stay: 0 running is measured, only its meaning changed.
    assert registry.get_sample_value("poolscope_engine_requests_running",
                                     labels("engine:vllm")) == 0

    exporter.admission.draining = True
    assert state("draining") == 1.0 and state("asleep") == 0.0
    exporter.admission.draining = False

    engine_server.body = fixture_text("vllm_awake")
    await exporter.loop.sample_all()
    assert state("asleep") == 0.0
    assert capacity() == (configured or 42)  # woken, it offers capacity again
