"""Fuzzing what the exporter reads from an engine and what it and the bridge write.

An engine's /metrics is input from another program and may be anything. Whatever
it is, parsing either yields values that are finite, non-negative and really on the
page, or fails with the documented error (PromTextError / SampleError with a reason
from the closed vocabulary). The JSON documents are strict JSON in every state:
a NaN never leaks out as a token most parsers reject.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.fake_gpus import three_gpus
from poolscope.bridge.summary import build_snapshot, encode_json
from poolscope.contract.fields import FIELDS
from poolscope.exporters.common.health import ErrorReason
from poolscope.exporters.common.promtext import PromTextError, select
from poolscope.exporters.common.sampling import SampleError
from poolscope.exporters.instance import snapshot
from poolscope.exporters.instance.engine import EngineReader, EngineSample, detect, interpret
from poolscope.exporters.instance.engines import MAPPINGS, EngineMapping
from poolscope.exporters.instance.gpu import GpuIdentity, GpuReading, GpuSample
from poolscope.exporters.instance.host import HostSample, NicCounters
from poolscope.exporters.instance.service import InstanceExporter, Settings
from tests.reliability.stack import ThreadedLoop

FUZZ = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])
ALL_NAMES = sorted(n for m in MAPPINGS.values() for n in m.names())
PARSE_REASONS = {ErrorReason.PARSE, ErrorReason.INVALID_VALUE}


def _strict(text: str) -> Any:
    def no_constants(token: str) -> None:
        raise AssertionError(f"non-standard JSON token {token}")
    return json.loads(text, parse_constant=no_constants)


# --- strategies: pages that are nearly right are the ones that find bugs -------

label_value = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
labels = st.one_of(
    st.just(""),
    st.dictionaries(st.from_regex(r"[a-z_]{1,6}", fullmatch=True), label_value, max_size=3)
    .map(lambda d: "{" + ",".join(f'{k}="{json.dumps(v)[1:-1]}"' for k, v in d.items()) + "}"),
    st.text(max_size=20).map(lambda t: "{" + t + "}"),  # anything between braces
)
value = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["NaN", "+Inf", "-Inf", "-0", "1e400", "-1", "0x10", "", "twelve", "1_0"]),
    st.integers(min_value=-(10**20), max_value=10**20).map(str),
)
sample_line = st.tuples(st.sampled_from(ALL_NAMES), labels, st.sampled_from([" ", "\t", "  "]),
                        value, st.sampled_from(["", " 1700000000000", " x", "\r"])
                        ).map(lambda t: "".join(t))
page = st.one_of(
    st.text(max_size=300),
    st.lists(st.one_of(sample_line, st.text(max_size=40),
                       st.sampled_from(["# TYPE vllm:num_requests_running gauge", "#", ""])),
             max_size=12).map("\n".join),
)


def _on_page(name: str, text: str) -> bool:
    return re.search(rf"^{re.escape(name)}(?=[{{ \t])", text, re.MULTILINE) is not None


@FUZZ
@given(page)
def test_select_returns_only_wanted_names_or_raises_its_documented_error(text: str) -> None:
    try:
        found = select(text, ALL_NAMES)
    except PromTextError:
        return
    assert set(found) <= set(ALL_NAMES)
    assert all(_on_page(name, text) for name in found)
    assert all(isinstance(v, float) for samples in found.values() for _labels, v in samples)


@FUZZ
@given(page, st.sampled_from(sorted(MAPPINGS)))
def test_interpret_yields_finite_non_negative_values_that_are_on_the_page(
        text: str, engine: str) -> None:
    mapping: EngineMapping = MAPPINGS[engine]
    try:
        sample = interpret(text, mapping)
    except SampleError as e:
        assert e.reason in PARSE_REASONS
        return
    measured = {attr: getattr(sample, attr) for attr in
                ("running", "waiting", "kv_cache_usage", "request_success", "prompt_tokens",
                 "generation_tokens")}
    assert any(v is not None for v in measured.values())
    for attr, v in measured.items():
        if v is None:
            continue
        assert math.isfinite(v) and v >= 0, (attr, v)
        # Never a filled-in value: some name the field reads is really on the page.
        assert any(_on_page(spelling, text) for series in getattr(mapping, attr)
                   for n in series.names for spelling in mapping.spellings(n)), (attr, v)
    if sample.kv_cache_usage is not None:
        assert sample.kv_cache_usage <= 1


@FUZZ
@given(page)
def test_detect_picks_a_known_engine_or_raises_parse(text: str) -> None:
    try:
        mapping = detect(text)
    except SampleError as e:
        assert e.reason is ErrorReason.PARSE
        return
    assert mapping in MAPPINGS.values()


@pytest.fixture(scope="module")
def engine_page() -> Iterator[tuple[str, dict[str, bytes]]]:
    """An HTTP endpoint whose body each example sets: bytes, not just text. Every
    path serves it, so llama.cpp's /props beside /metrics is hostile too."""
    loop = ThreadedLoop()
    held: dict[str, bytes] = {"body": b""}

    async def handler(_: web.Request) -> web.Response:
        return web.Response(body=held["body"], content_type="text/plain")

    async def start() -> tuple[web.AppRunner, str]:
        app = web.Application()
        app.router.add_get("/{path:.*}", handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return runner, f"http://127.0.0.1:{runner.addresses[0][1]}/metrics"

    runner, url = loop.run(start())
    yield url, held
    loop.run(runner.cleanup())
    loop.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.one_of(st.binary(max_size=200), page.map(str.encode),
                 page.map(lambda t: t.encode("utf-16"))))
def test_engine_reader_over_http_takes_any_bytes(engine_page: tuple[str, dict[str, bytes]],
                                                 body: bytes) -> None:
    url, held = engine_page
    held["body"] = body

    async def read() -> EngineSample:
        reader = EngineReader(url, timeout=5)
        try:
            return await reader.read()
        finally:
            await reader.close()

    try:
        sample = asyncio.run(read())
    except SampleError as e:
        assert e.reason in PARSE_REASONS
        return
    values = [sample.running, sample.waiting, sample.kv_cache_usage, sample.request_success,
              sample.prompt_tokens, sample.generation_tokens]
    assert all(v is None or (math.isfinite(v) and v >= 0) for v in values)


# --- the JSON documents ------------------------------------------------------

any_float = st.floats(allow_nan=True, allow_infinity=True)
opt_float = st.none() | any_float
host_samples = st.builds(
    HostSample, monotonic=st.floats(0, 1e6), wall_time=st.floats(0, 4e9),
    cpu_utilization=opt_float, cpu_count=st.none() | st.integers(1, 512),
    memory_total=st.integers(0, 2**50), memory_available=st.integers(0, 2**50),
    network=st.dictionaries(st.text(max_size=8), st.builds(NicCounters, st.integers(0, 2**64),
                                                           st.integers(0, 2**64)), max_size=3),
    network_rx_mbps=opt_float, network_tx_mbps=opt_float)
gpu_samples = st.builds(GpuSample, st.lists(st.builds(
    GpuReading, st.builds(GpuIdentity, st.integers(0, 7), st.text(max_size=8),
                          st.text(max_size=8)),
    st.booleans(), opt_float, opt_float, opt_float, opt_float, opt_float), max_size=3).map(tuple))
engine_samples = st.builds(EngineSample, st.sampled_from(sorted(MAPPINGS)), opt_float,
                           opt_float, opt_float, opt_float, opt_float, opt_float, opt_float,
                           opt_float)


@pytest.fixture(scope="module")
def exporter() -> InstanceExporter:
    return InstanceExporter(Settings(instance_id="fuzz", proxy_id="p", engine_metrics_url=
                                     "http://127.0.0.1:9/metrics"), nvml=three_gpus().module())


def _leaves(doc: Any) -> Iterator[Any]:
    if isinstance(doc, dict):
        for v in doc.values():
            yield from _leaves(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from _leaves(v)
    else:
        yield doc


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.none() | host_samples, st.none() | gpu_samples, st.none() | engine_samples)
def test_resource_snapshot_is_strict_json_in_any_state(
        exporter: InstanceExporter, host: HostSample | None, gpu: GpuSample | None,
        engine: EngineSample | None) -> None:
    assert exporter.engine is not None
    exporter.host.value, exporter.gpu.value, exporter.engine.value = host, gpu, engine
    doc = _strict(snapshot.dumps(snapshot.build(exporter)))
    assert all(not isinstance(v, float) or math.isfinite(v) for v in _leaves(doc))


ROLLUP_NAMES = sorted({f.rollup for f in FIELDS})
rollup_sample = st.tuples(
    st.fixed_dictionaries(
        {"__name__": st.sampled_from([*ROLLUP_NAMES, "proxy_pool:x", "up"])},
        optional={"proxy_id": st.text(max_size=6), "source": st.text(max_size=6),
                  "state": st.sampled_from(["accepting", "draining", "bogus", ""]),
                  "queue": st.sampled_from(["prepare", "ready", "other"]),
                  "quality": st.sampled_from(["complete", "partial", "missing", "odd"])}),
    st.none() | st.floats(allow_nan=False, allow_infinity=False))


@FUZZ
@given(st.lists(rollup_sample, max_size=40))
def test_pool_summary_is_strict_json_for_any_rollup_series(samples: list[Any]) -> None:
    snap = build_snapshot(samples, 1_700_000_000.0)
    doc = _strict(encode_json(snap.pools).decode())
    for pool in doc.values():
        assert pool["health"]["data_quality"] in ("complete", "partial", "missing")
        assert all(not isinstance(v, float) or math.isfinite(v) for v in _leaves(pool))
