"""Engine load from real-shaped /metrics pages, and every way a page can be bad."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from exporters.common.health import ErrorReason
from exporters.common.sampling import SampleError
from exporters.common.thresholds import KV_FULL, WAITING_Q
from exporters.instance.engine import EngineSample, detect, interpret
from exporters.instance.engines import MAPPINGS, SGLANG, TGI, VLLM
from tests.instance.conftest import (
    EngineServer,
    MakeExporter,
    fixture_text,
    health,
    labels,
    names,
)
from tests.support.prometheus import free_port

ENGINE_SERIES = {
    "poolscope_engine_requests_running", "poolscope_engine_requests_waiting",
    "poolscope_engine_kv_cache_usage_ratio", "poolscope_engine_request_success_total",
    "poolscope_engine_prompt_tokens_total", "poolscope_engine_generation_tokens_total",
}


@pytest.mark.parametrize(("fixture", "expected"), [
    ("vllm", dict(engine="vllm", running=37, waiting=12, kv_cache_usage=0.8123,
                  request_success=11008 + 214 + 9, prompt_tokens=8128902,
                  generation_tokens=7557572)),
    # Data parallel: two `engine` label sets summed, the KV ratio averaged.
    ("vllm_dp", dict(engine="vllm", running=24 + 18, waiting=3, kv_cache_usage=(0.61 + 0.43) / 2,
                     request_success=5602 + 5491, prompt_tokens=4100200 + 3900300,
                     generation_tokens=3800100 + 3700200)),
    # v0 has only the old KV gauge: the fallback name is used.
    ("vllm_legacy", dict(engine="vllm", running=12, waiting=5, kv_cache_usage=0.734,
                         request_success=3100, prompt_tokens=2345678,
                         generation_tokens=1234567)),
    ("sglang", dict(engine="sglang", running=162 + 150, waiting=2826 + 2790,
                    kv_cache_usage=(0.28 + 0.34) / 2, request_success=None,
                    prompt_tokens=8128902, generation_tokens=7557572)),
    # TGI: no KV gauge and no token counters, so those are None (absent), never 0.
    ("tgi", dict(engine="tgi", running=14, waiting=6, kv_cache_usage=None,
                 request_success=1398, prompt_tokens=None, generation_tokens=None)),
])
def test_fixture_pages_map_to_engine_load(fixture: str, expected: dict[str, object]) -> None:
    text = fixture_text(fixture)
    mapping = detect(text)
    sample = interpret(text, mapping)
    assert mapping.engine == expected["engine"]
    for field, value in expected.items():
        if field == "engine":
            continue
        got = getattr(sample, field)
        if value is None:
            assert got is None, field
        else:
            assert got == pytest.approx(value), field


def test_vllm_v1_prefers_the_new_kv_name_over_the_deprecated_one() -> None:
    text = fixture_text("vllm").replace(
        'vllm:gpu_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} '
        "0.8123", 'vllm:gpu_cache_usage_perc{engine="0",model_name="x"} 0.5')
    assert interpret(text, VLLM).kv_cache_usage == pytest.approx(0.8123)


@pytest.mark.parametrize(("mutate", "reason"), [
    (lambda t: t.replace("vllm:num_requests_waiting{engine", "vllm:num_requests_waiting{engine{"),
     ErrorReason.PARSE),
    (lambda t: t.replace('vllm:num_requests_running{engine="0",model_name="meta-llama/'
                         'Llama-3.1-8B-Instruct"} 37.0', "vllm:num_requests_running 3x7"),
     ErrorReason.PARSE),
    (lambda t: t.replace("} 37.0", "} NaN"), ErrorReason.INVALID_VALUE),
    (lambda t: t.replace("} 0.8123", "} +Inf"), ErrorReason.INVALID_VALUE),
    (lambda t: t.replace("} 12.0", "} -1.0"), ErrorReason.INVALID_VALUE),
    (lambda t: t.replace("} 0.8123", "} 1.5"), ErrorReason.INVALID_VALUE),
    (lambda t: "<html><body>502 Bad Gateway</body></html>", ErrorReason.PARSE),
    (lambda t: "", ErrorReason.PARSE),
])
def test_bad_pages_fail_with_a_reason(mutate: Callable[[str], str], reason: ErrorReason) -> None:
    text = mutate(fixture_text("vllm"))
    with pytest.raises(SampleError) as err:
        interpret(text, detect(text))
    assert err.value.reason is reason


def test_unrelated_negative_values_do_not_fail_the_sample() -> None:
    # v0 reports prefix-cache hit rates of -1 when disabled; we do not read them.
    text = fixture_text("vllm_legacy")
    assert "vllm:gpu_prefix_cache_hit_rate" in text and "} -1.0" in text
    assert interpret(text, VLLM).running == 12


def test_forced_engine_that_does_not_match_the_page_is_a_parse_error() -> None:
    with pytest.raises(SampleError) as err:
        interpret(fixture_text("tgi"), SGLANG)
    assert err.value.reason is ErrorReason.PARSE


def test_every_mapping_reads_only_names_of_its_own_engine() -> None:
    prefixes = {"vllm": "vllm:", "sglang": "sglang:", "tgi": "tgi_"}
    for engine, mapping in MAPPINGS.items():
        assert all(n.startswith(prefixes[engine]) for n in mapping.names())
    assert TGI.kv_cache_usage == ()


async def test_exporter_serves_engine_series_with_engine_source(
        engine_server: EngineServer, make_exporter: MakeExporter) -> None:
    engine_server.body = fixture_text("vllm_dp")
    exporter, registry = make_exporter(engine_metrics_url=engine_server.url)
    await exporter.loop.sample_all()
    src = labels("engine:vllm")
    assert registry.get_sample_value("poolscope_engine_requests_running", src) == 42
    assert registry.get_sample_value("poolscope_engine_kv_cache_usage_ratio", src) == \
        pytest.approx(0.52)
    assert registry.get_sample_value("poolscope_engine_prompt_tokens_total", src) == 8000500
    assert registry.get_sample_value("poolscope_collector_success", health("engine")) == 1


async def test_tgi_kv_series_is_absent_not_zero(
        engine_server: EngineServer, make_exporter: MakeExporter) -> None:
    engine_server.body = fixture_text("tgi")
    exporter, registry = make_exporter(engine_metrics_url=engine_server.url, engine="tgi")
    await exporter.loop.sample_all()
    present = names(registry)
    assert "poolscope_engine_requests_waiting" in present
    assert "poolscope_engine_kv_cache_usage_ratio" not in present
    assert "poolscope_engine_prompt_tokens_total" not in present


@pytest.mark.parametrize(("setup", "reason"), [
    (lambda s: setattr(s, "status", 500), ErrorReason.HTTP_STATUS),
    (lambda s: setattr(s, "body", "vllm:num_requests_running{engine=\"0\"} NaN\n"),
     ErrorReason.INVALID_VALUE),
    (lambda s: setattr(s, "body", "vllm:num_requests_running{engine=\"0\" 3\n"),
     ErrorReason.PARSE),
    (lambda s: setattr(s, "hang", True), ErrorReason.TIMEOUT),
])
async def test_dead_or_garbled_engine_goes_absent_and_says_why(
        engine_server: EngineServer, make_exporter: MakeExporter,
        setup: Callable[[EngineServer], None], reason: ErrorReason) -> None:
    engine_server.body = fixture_text("vllm")
    # Short, for the hang case, yet long enough for the first, healthy read on a busy machine.
    exporter, registry = make_exporter(engine_metrics_url=engine_server.url,
                                       engine_timeout=1.0)
    await exporter.loop.sample_all()
    assert registry.get_sample_value("poolscope_engine_requests_running",
                                     labels("engine:vllm")) == 37
    setup(engine_server)
    await exporter.loop.sample_all()
    present = names(registry)
    assert not present & ENGINE_SERIES
    assert "poolscope_host_memory_total_bytes" in present  # everything else keeps serving
    assert registry.get_sample_value("poolscope_collector_success", health("engine")) == 0
    assert registry.get_sample_value("poolscope_collector_errors_total",
                                     health("engine", reason=reason.value)) == 1
    # The age keeps counting from the last good sample: freshness stays honest.
    assert registry.get_sample_value("poolscope_collector_sample_age_seconds",
                                     health("engine")) is not None


async def test_connection_refused_is_a_connection_error(make_exporter: MakeExporter) -> None:
    exporter, registry = make_exporter(
        engine_metrics_url=f"http://127.0.0.1:{free_port()}/metrics")
    await exporter.loop.sample_all()
    assert not names(registry) & ENGINE_SERIES
    assert registry.get_sample_value("poolscope_collector_errors_total",
                                     health("engine", reason="connection")) == 1
    # Never succeeded: no age, no last-success time (absent before the first success).
    assert registry.get_sample_value("poolscope_collector_sample_age_seconds",
                                     health("engine")) is None


async def test_engine_recovers_after_failure(
        engine_server: EngineServer, make_exporter: MakeExporter) -> None:
    engine_server.status = 500
    exporter, registry = make_exporter(engine_metrics_url=engine_server.url)
    await exporter.loop.sample_all()
    assert registry.get_sample_value("poolscope_collector_success", health("engine")) == 0
    engine_server.status, engine_server.body = 200, fixture_text("sglang")
    await exporter.loop.sample_all()
    assert registry.get_sample_value("poolscope_engine_requests_running",
                                     labels("engine:sglang")) == 312
    assert registry.get_sample_value("poolscope_collector_success", health("engine")) == 1


@pytest.mark.parametrize(("waiting", "kv", "score"), [
    (2.0, 0.5, 0.625),   # the KV cache is the tighter limit: 0.5 / KV_FULL
    (10.0, 0.5, 2.0),    # the queue is: 10 / WAITING_Q
    (3.0, None, 0.6),    # TGI: no KV figure, scored on its queue alone
    (None, None, None),  # nothing to score: absent, not 0
])
def test_engine_saturation_is_the_worse_of_queue_and_kv(waiting: float | None, kv: float | None,
                                                        score: float | None) -> None:
    sample = EngineSample("vllm", running=1.0, waiting=waiting, kv_cache_usage=kv,
                          request_success=None, prompt_tokens=None, generation_tokens=None)
    assert sample.saturation == (None if score is None else pytest.approx(score))
    assert (WAITING_Q, KV_FULL) == (5.0, 0.8)  # the limits the cases above were worked with
