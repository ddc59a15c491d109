"""Engine load from real-shaped /metrics pages, and every way a page can be bad."""

from __future__ import annotations

import contextlib
import gzip
from collections.abc import AsyncIterator, Callable

import pytest
from aiohttp import web

from harness.prometheus import free_port
from poolscope.contract import catalog
from poolscope.contract.thresholds import KV_FULL, WAITING_Q
from poolscope.exporters.common.fetch import MAX_PAGE_BYTES
from poolscope.exporters.common.health import ErrorReason
from poolscope.exporters.common.sampling import SampleError
from poolscope.exporters.instance.engine import EngineReader, EngineSample, detect, interpret
from poolscope.exporters.instance.engines import MAPPINGS, SGLANG, TGI, TRTLLM, VLLM
from tests.instance.conftest import (
    FIXTURES,
    EngineServer,
    MakeExporter,
    fixture_text,
    health,
    labels,
    names,
)

ENGINE_SERIES = {
    "poolscope_engine_requests_running", "poolscope_engine_requests_waiting",
    "poolscope_engine_kv_cache_usage_ratio", "poolscope_engine_request_success_total",
    "poolscope_engine_prompt_tokens_total", "poolscope_engine_generation_tokens_total",
}


def _kv(*ranks: float) -> dict[str, float]:
    return {"kv_cache_usage": sum(ranks) / len(ranks), "kv_cache_usage_max": max(ranks)}


NO_KV = {"kv_cache_usage": None, "kv_cache_usage_max": None}

# What a correct reader gets from each real page (tests/fixtures/engines/README.md
# says where each page comes from and why these are its true values).
@pytest.mark.parametrize(("fixture", "expected"), [
    ("vllm", dict(engine="vllm", running=37, waiting=12, **_kv(0.8123),
                  request_success=11008 + 214 + 9, prompt_tokens=8128902,
                  generation_tokens=7557572)),
    # Data parallel: two `engine` label sets summed; KV mean and fullest rank.
    ("vllm_dp", dict(engine="vllm", running=24 + 18, waiting=3, **_kv(0.61, 0.43),
                     request_success=5602 + 5491, prompt_tokens=4100200 + 3900300,
                     generation_tokens=3800100 + 3700200)),
    # v0 has only the old KV gauge: the fallback name is used.
    ("vllm_legacy", dict(engine="vllm", running=12, waiting=5, **_kv(0.734),
                         request_success=3100, prompt_tokens=2345678,
                         generation_tokens=1234567)),
    # 4 API servers x 2 engines: each engine's KV gauge comes once per API-server
    # `pid`, one copy live and the rest 0. Copies count once; ranks are averaged.
    ("vllm_api_servers", dict(engine="vllm", running=16, waiting=3,
                              **_kv(0.6530455880475035, 0.41), request_success=9699,
                              prompt_tokens=2367362, generation_tokens=628243)),
    ("sglang", dict(engine="sglang", running=162 + 150, waiting=2826 + 2790,
                    **_kv(0.28, 0.34), request_success=None,
                    prompt_tokens=8128902, generation_tokens=7557572)),
    # Priority scheduling: the total under priority="" plus one series per priority.
    ("sglang_priority", dict(engine="sglang", running=24, waiting=9,
                             **_kv(0.711370382585752), prompt_tokens=2597646,
                             generation_tokens=894256)),
    # A hybrid model: token_usage reports the Mamba pool (0.88 / 0.69); the KV
    # cache is full_token_usage.
    ("sglang_kv_pools", dict(engine="sglang", running=66, waiting=7,
                             **_kv(0.22909164428710938, 0.3113746643066406),
                             prompt_tokens=5120934, generation_tokens=1433021)),
    # A decode worker: queue 3 + grammar 2 + prealloc 11 + transfer 5 wait.
    ("sglang_disagg", dict(engine="sglang", running=42, waiting=3 + 2 + 11 + 5,
                           **_kv(0.6152812070066824), prompt_tokens=9120442,
                           generation_tokens=2750118)),
    # 8 context-parallel ranks report the same requests under tp_rank 0..7.
    ("sglang_cp", dict(engine="sglang", running=12, waiting=4,
                       **_kv(0.36999969482421874), prompt_tokens=40998120,
                       generation_tokens=5120334)),
    # Re-served by SGLang's gateway with `sglang_` names.
    ("sglang_underscore", dict(engine="sglang", running=7, waiting=2,
                               **_kv(0.1199969900240798), prompt_tokens=418233,
                               generation_tokens=98112)),
    # TGI: no KV gauge and no token counters, so those are None (absent), never 0.
    ("tgi", dict(engine="tgi", running=14, waiting=6, **NO_KV,
                 request_success=1398, prompt_tokens=None, generation_tokens=None)),
    # llama.cpp as the live server in tests/live/ served it: no KV figure since 2025,
    # and the slot count lives in /props, not on this page.
    ("llamacpp", dict(engine="llamacpp", running=0, waiting=0, **NO_KV,
                      request_success=None, prompt_tokens=2, generation_tokens=2000,
                      capacity=None)),
    # The same server with 5 requests sent to its 2 slots; generated tokens are
    # counted when a request ends, so none yet.
    ("llamacpp_busy", dict(engine="llamacpp", running=2, waiting=3, **NO_KV,
                           prompt_tokens=10, generation_tokens=0)),
    ("llamacpp_legacy", dict(engine="llamacpp", running=3, waiting=1, **_kv(0.375),
                             prompt_tokens=48213, generation_tokens=20517)),
    # TensorRT-LLM in Triton: scheduled requests run, `max` is the batch limit,
    # success is the backend model's own counter (not the ensemble's as well).
    ("triton_trtllm", dict(engine="trtllm", running=8, waiting=4, **_kv(0.6),
                           request_success=1200, prompt_tokens=412800,
                           generation_tokens=153600, capacity=256)),
    # Backends before v0.18 publish neither `waiting` nor the KV fraction: both are
    # derived as the backend derives them, active - scheduled and used / max blocks.
    ("triton_trtllm_legacy", dict(engine="trtllm", running=8, waiting=12 - 8,
                                  **_kv(3744 / 6240), request_success=1200, capacity=256)),
    # trtllm-serve's own names: active requests run, the executor's most active
    # requests are its capacity; gauges carry the API server's pid (multiprocess mode).
    ("trtllm_serve", dict(engine="trtllm-serve", running=48, waiting=7, **_kv(0.626),
                          request_success=1191 + 9, prompt_tokens=1843200,
                          generation_tokens=307200, capacity=256)),
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
    # A wanted name with no value is a broken line, not a line to skip.
    (lambda t: t + "vllm:num_requests_waiting\n", ErrorReason.PARSE),
    (lambda t: t + "vllm:num_requests_waiting", ErrorReason.PARSE),
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


def test_a_page_of_no_known_engine_says_so_and_names_the_engines() -> None:
    with pytest.raises(SampleError) as err:
        detect("# TYPE up gauge\nup 1\nnv_inference_request_success{model=\"m\"} 3\n")
    assert err.value.reason is ErrorReason.PARSE
    assert all(engine in str(err.value) for engine in MAPPINGS)


def test_a_page_of_two_engines_is_not_guessed_between() -> None:
    # A sidecar that merges two engines' pages: auto-detection must not pick one.
    text = fixture_text("vllm") + fixture_text("llamacpp")
    with pytest.raises(SampleError) as err:
        detect(text)
    assert err.value.reason is ErrorReason.PARSE
    assert "llamacpp, vllm" in str(err.value) and "--engine" in str(err.value)
    assert interpret(text, VLLM).running == 37  # naming the engine reads it


def test_a_duplicated_series_line_is_a_parse_error_not_a_double_count() -> None:
    line = ('vllm:num_requests_running{engine="0",model_name="meta-llama/'
            'Llama-3.1-8B-Instruct"} 37.0\n')
    text = fixture_text("vllm").replace(line, line + line)
    assert text.count(line) == 2
    with pytest.raises(SampleError) as err:
        interpret(text, VLLM)
    assert err.value.reason is ErrorReason.PARSE and "duplicate" in str(err.value)


def test_sglang_priority_totals_are_read_alone_but_a_breakdown_alone_is_summed() -> None:
    page = ('sglang:num_running_reqs{priority="",tp_rank="0"} 5\n'
            'sglang:num_running_reqs{priority="1",tp_rank="0"} 3\n'
            'sglang:num_running_reqs{priority="2",tp_rank="0"} 2\n')
    assert interpret(page, SGLANG).running == 5
    breakdown = "".join(line + "\n" for line in page.splitlines()[1:])
    assert interpret(breakdown, SGLANG).running == 5
    # Rank by rank: dp_rank 0 gives its total, dp_rank 1 only its parts.
    ranks = ('sglang:num_running_reqs{dp_rank="0",priority=""} 10\n'
             'sglang:num_running_reqs{dp_rank="0",priority="1"} 10\n'
             'sglang:num_running_reqs{dp_rank="1",priority="1"} 4\n'
             'sglang:num_running_reqs{dp_rank="1",priority="2"} 3\n')
    assert interpret(ranks, SGLANG).running == 10 + 7
    # Token counters are labelled with each request's own priority: "" is a share.
    tokens = ('sglang:prompt_tokens_total{priority=""} 5\n'
              'sglang:prompt_tokens_total{priority="1"} 100\n')
    assert interpret(tokens, SGLANG).prompt_tokens == 105


def test_trtllm_derived_figures_are_refused_when_impossible_and_absent_when_undefined(
) -> None:
    legacy = fixture_text("triton_trtllm_legacy")
    active = 'nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="active",version="1"}'
    blocks = 'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="tensorrt_llm",'
    assert f"{active} 12" in legacy and f'{blocks}version="1"}} 6240' in legacy
    # Fewer active than scheduled requests: no waiting count can come of it.
    with pytest.raises(SampleError) as err:
        interpret(legacy.replace(f"{active} 12", f"{active} 5"), TRTLLM)
    assert err.value.reason is ErrorReason.INVALID_VALUE
    # One model without the `scheduled` series: no rank may silently drop out.
    other = ('nv_trt_llm_request_metrics{model="other",request_type="active",version="1"} 7\n')
    with pytest.raises(SampleError) as err:
        interpret(legacy + other, TRTLLM)
    assert err.value.reason is ErrorReason.INVALID_VALUE
    # No KV blocks configured: the ratio is undefined, so absent (never 0).
    sample = interpret(legacy.replace(f'{blocks}version="1"}} 6240', f'{blocks}version="1"}} 0'),
                       TRTLLM)
    assert sample.kv_cache_usage is None and sample.waiting == 4


def test_trtllm_serve_before_its_first_iteration_statistics_is_not_measured() -> None:
    # Until a request completes, the one series is the cached-token counter created at
    # start-up: no load is measured, which is not a load of 0.
    family = "trtllm_prompt_cached_tokens_total"
    page = "".join(line.replace("614400.0", "0.0") + "\n"
                   for line in fixture_text("trtllm_serve").splitlines() if family in line)
    assert detect(page).engine == "trtllm-serve"
    with pytest.raises(SampleError) as err:
        interpret(page, detect(page))
    assert err.value.reason is ErrorReason.PARSE
    assert "no trtllm-serve load metrics" in str(err.value)


def test_trtllm_serve_gauges_of_several_api_server_processes_count_once() -> None:
    # The same engine's gauges once per API-server pid: copies, read at their max.
    text = fixture_text("trtllm_serve")
    second = [line.replace('pid="2851"', 'pid="2852"').replace(" 48.0", " 0.0")
              for line in text.splitlines() if 'pid="2851"' in line]
    sample = interpret(text + "\n".join(second) + "\n", MAPPINGS["trtllm-serve"])
    assert (sample.running, sample.waiting, sample.capacity) == (48, 7, 256)


def test_forced_engine_that_does_not_match_the_page_is_a_parse_error() -> None:
    with pytest.raises(SampleError) as err:
        interpret(fixture_text("tgi"), SGLANG)
    assert err.value.reason is ErrorReason.PARSE


def test_every_mapping_reads_only_names_of_its_own_engine() -> None:
    prefixes = [(p, m.engine) for m in MAPPINGS.values() for p in m.detect]
    for mapping in MAPPINGS.values():
        assert mapping.running[0].names[0].startswith(mapping.detect)
    # No engine's prefix starts another engine's names, so detection cannot confuse them.
    assert not [(a, b) for a, ea in prefixes for b, eb in prefixes
                if ea != eb and b.startswith(a)]
    assert set(MAPPINGS) == set(catalog.ENGINES)
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


async def test_llamacpp_slots_from_props_are_its_capacity(
        engine_server: EngineServer, make_exporter: MakeExporter) -> None:
    engine_server.body = fixture_text("llamacpp")
    engine_server.props = (FIXTURES / "llamacpp_props.json").read_text()
    exporter, registry = make_exporter(engine_metrics_url=engine_server.url)
    await exporter.loop.sample_all()
    src = labels("engine:llamacpp")
    assert registry.get_sample_value("poolscope_instance_capacity_requests", src) == 2
    assert registry.get_sample_value("poolscope_engine_generation_tokens_total", src) == 2000
    assert "poolscope_engine_kv_cache_usage_ratio" not in names(registry)
    assert registry.get_sample_value("poolscope_collector_success",
                                     health("engine_capacity")) == 1


@pytest.mark.parametrize(("props", "reason"), [
    (None, "http_status"),  # 404: a reverse proxy that passes only /metrics
    ("<html>not json", "parse"),
    ('{"total_slots": 0}', "invalid_value"),
    ('{"role": "router", "max_instances": 4}', "invalid_value"),  # a router's own /props
])
async def test_an_unreadable_props_costs_the_capacity_not_the_load(
        engine_server: EngineServer, make_exporter: MakeExporter,
        caplog: pytest.LogCaptureFixture, props: str | None, reason: str) -> None:
    engine_server.body = fixture_text("llamacpp_busy")
    engine_server.props = (FIXTURES / "llamacpp_props.json").read_text()
    exporter, registry = make_exporter(engine_metrics_url=engine_server.url)
    await exporter.loop.sample_all()
    src = labels("engine:llamacpp")
    assert registry.get_sample_value("poolscope_instance_capacity_requests", src) == 2

    engine_server.props = props
    await exporter.loop.sample_all()
    # The load is measured and published as before...
    assert registry.get_sample_value("poolscope_collector_success", health("engine")) == 1
    assert registry.get_sample_value("poolscope_engine_requests_running", src) == 2
    assert registry.get_sample_value("poolscope_engine_requests_waiting", src) == 3
    assert registry.get_sample_value("poolscope_engine_prompt_tokens_total", src) == 10
    # ...the capacity's own collector says why it has none, and the log names the URL.
    assert registry.get_sample_value("poolscope_collector_success",
                                     health("engine_capacity")) == 0
    assert registry.get_sample_value("poolscope_collector_errors_total",
                                     health("engine_capacity", reason=reason)) == 1
    assert registry.get_sample_value("poolscope_collector_errors_total",
                                     health("engine", reason=reason)) == 0
    props_url = engine_server.url.removesuffix("metrics") + "props"
    assert any(props_url in r.getMessage() and reason in r.getMessage()
               for r in caplog.records), caplog.text
    # No stale slot count: the capacity falls back to the learned one (2 seen running).
    assert registry.get_sample_value("poolscope_instance_capacity_requests", src) is None
    assert registry.get_sample_value("poolscope_instance_capacity_requests",
                                     labels("learned")) == 2

    engine_server.props = (FIXTURES / "llamacpp_props.json").read_text()
    await exporter.loop.sample_all()
    assert registry.get_sample_value("poolscope_collector_success",
                                     health("engine_capacity")) == 1
    assert registry.get_sample_value("poolscope_instance_capacity_requests", src) == 2


async def test_a_hanging_props_times_out_alone_within_the_engine_timeout(
        engine_server: EngineServer, make_exporter: MakeExporter) -> None:
    engine_server.body = fixture_text("llamacpp_busy")
    engine_server.props_hang = True
    exporter, registry = make_exporter(engine_metrics_url=engine_server.url,
                                       engine_timeout=0.3)
    await exporter.loop.sample_all()
    assert registry.get_sample_value("poolscope_collector_success", health("engine")) == 1
    assert registry.get_sample_value("poolscope_engine_requests_running",
                                     labels("engine:llamacpp")) == 2
    assert registry.get_sample_value("poolscope_collector_errors_total",
                                     health("engine_capacity", reason="timeout")) == 1


async def test_engines_that_state_no_slots_beside_their_page_have_no_capacity_collector(
        engine_server: EngineServer, make_exporter: MakeExporter) -> None:
    engine_server.body = fixture_text("vllm")
    exporter, registry = make_exporter(engine_metrics_url=engine_server.url)
    await exporter.loop.sample_all()
    assert engine_server.props_requests == 0
    assert not [s for m in registry.collect() for s in m.samples
                if s.labels.get("collector") == "engine_capacity"]


async def test_a_configured_capacity_wins_and_props_is_not_read(
        engine_server: EngineServer, make_exporter: MakeExporter) -> None:
    engine_server.body = fixture_text("llamacpp")  # props stays None: /props answers 404
    exporter, registry = make_exporter(engine_metrics_url=engine_server.url, capacity=6)
    await exporter.loop.sample_all()
    assert registry.get_sample_value("poolscope_instance_capacity_requests",
                                     labels("configured")) == 6
    assert registry.get_sample_value("poolscope_collector_success", health("engine")) == 1
    assert engine_server.props_requests == 0
    assert registry.get_sample_value("poolscope_collector_success",
                                     health("engine_capacity")) is None


async def test_trtllm_max_batch_is_its_capacity_over_the_learned_mark(
        engine_server: EngineServer, make_exporter: MakeExporter) -> None:
    engine_server.body = fixture_text("triton_trtllm")
    exporter, registry = make_exporter(engine_metrics_url=engine_server.url)
    await exporter.loop.sample_all()
    assert registry.get_sample_value("poolscope_instance_capacity_requests",
                                     labels("engine:trtllm")) == 256
    assert registry.get_sample_value("poolscope_engine_kv_cache_usage_max_ratio",
                                     labels("engine:trtllm")) == pytest.approx(0.6)


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
    sample = EngineSample("vllm", running=1.0, waiting=waiting, kv_cache_usage=0.0,
                          kv_cache_usage_max=kv, request_success=None, prompt_tokens=None,
                          generation_tokens=None)
    assert sample.saturation == (None if score is None else pytest.approx(score))
    assert (WAITING_Q, KV_FULL) == (5.0, 0.8)  # the limits the cases above were worked with


@pytest.fixture
async def hostile_engine() -> AsyncIterator[str]:
    """Pages no engine should serve: endless, a gzip bomb, a redirect to a real page."""
    async def endless(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await resp.prepare(request)
        line = b'vllm:num_requests_running{engine="0"} 1\n' * 1600  # ~64 KiB
        with contextlib.suppress(ConnectionError):
            for _ in range(10_000):  # 640 MiB at most: bounded, and far past the limit
                await resp.write(line)
        return resp

    bomb = gzip.compress(b"\n" * (2 * MAX_PAGE_BYTES), compresslevel=9)

    async def gzip_bomb(_: web.Request) -> web.Response:
        return web.Response(body=bomb, headers={"Content-Type": "text/plain",
                                                "Content-Encoding": "gzip"})

    async def redirect(_: web.Request) -> web.Response:
        raise web.HTTPFound("/real")

    async def real(_: web.Request) -> web.Response:
        return web.Response(text=fixture_text("vllm"), content_type="text/plain")

    app = web.Application()
    for path, handler in (("/endless", endless), ("/bomb", gzip_bomb),
                          ("/redirect", redirect), ("/real", real)):
        app.router.add_get(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


@pytest.mark.parametrize(("path", "reason", "said"), [
    ("/endless", ErrorReason.TOO_LARGE, "larger than"),
    ("/bomb", ErrorReason.TOO_LARGE, "larger than"),
    # Another page's numbers are not this engine's: the redirect is not followed.
    ("/redirect", ErrorReason.HTTP_STATUS, "redirects are not followed"),
])
async def test_an_endless_bombed_or_redirected_page_fails_with_its_reason(
        hostile_engine: str, make_exporter: MakeExporter, path: str, reason: ErrorReason,
        said: str) -> None:
    reader = EngineReader(hostile_engine + path, "vllm", timeout=30)
    try:
        with pytest.raises(SampleError) as err:
            await reader.read()
    finally:
        await reader.close()
    assert err.value.reason is reason and said in str(err.value)
    # Through the exporter: no engine series, the failure counted under its reason.
    exporter, registry = make_exporter(engine_metrics_url=hostile_engine + path,
                                       engine="vllm", engine_timeout=30)
    await exporter.loop.sample_all()
    assert not names(registry) & ENGINE_SERIES
    assert registry.get_sample_value("poolscope_collector_errors_total",
                                     health("engine", reason=reason.value)) == 1
    honest = EngineReader(hostile_engine + "/real", "vllm")
    try:  # the same server's plain page reads fine: the bounds cost nothing there
        assert (await honest.read()).running == 37
    finally:
        await honest.close()
