"""Absurd stated numbers (a max batch of 1e12, a billion llama.cpp slots) fail their
read with `invalid_value`, through the real exporter against a local engine serving
real fixture text with one number changed; and the documented ranges are the code's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from poolscope.exporters.common.plausible import (
    MAX_INSTANCE_REQUESTS,
    RANGES,
    RUNNING,
    SLOTS,
    Range,
)
from tests.instance.conftest import (
    FIXTURES,
    EngineServer,
    MakeExporter,
    fixture_text,
    health,
    labels,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"


def swap(text: str, old: str, new: str) -> str:
    """`text` with its one `old` replaced: a mutation that missed would prove nothing."""
    assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times"
    return text.replace(old, new)


@pytest.mark.parametrize(("fixture", "line", "absurd"), [
    ("triton_trtllm",
     'nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="max",version="1"} 256',
     "1e12"),
    ("triton_trtllm",
     'nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="max",version="1"} 256',
     str(MAX_INSTANCE_REQUESTS + 1)),
    ("trtllm_serve",
     'trtllm_max_num_active_requests{engine_type="undefined",model_name="undefined",'
     'pid="2851"} 256.0', "1e+12"),
    # Requests waiting past what a queue holds, from an engine that states no capacity.
    ("vllm", 'vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"}'
     ' 12.0', "1e12"),
], ids=["trtllm-max-1e12", "trtllm-max-100001", "trtllm-serve-max-1e12", "vllm-waiting-1e12"])
async def test_an_absurd_number_on_the_engine_page_fails_the_read_by_name(
        engine_server: EngineServer, make_exporter: MakeExporter,
        caplog: pytest.LogCaptureFixture, fixture: str, line: str, absurd: str) -> None:
    """The stated capacity is one number of the page: a page that states an absurd one
    cannot be trusted for the rest, so the sample fails whole (engine.py), and the
    pool's capacity is not 1e12 with the pool reading idle."""
    real = fixture_text(fixture)
    engine_server.body = real
    exporter, registry = make_exporter(engine_metrics_url=engine_server.url)
    await exporter.loop.sample_all()
    assert registry.get_sample_value("poolscope_collector_success", health("engine")) == 1

    engine_server.body = swap(real, line, f"{line.rsplit(' ', 1)[0]} {absurd}")
    await exporter.loop.sample_all()
    assert registry.get_sample_value("poolscope_collector_success", health("engine")) == 0
    assert registry.get_sample_value("poolscope_collector_errors_total",
                                     health("engine", reason="invalid_value")) == 1
    source = labels(f"engine:{fixture.replace('_', '-').removeprefix('triton-')}")
    for name in ("poolscope_instance_capacity_requests", "poolscope_engine_requests_running"):
        assert registry.get_sample_value(name, source) is None
    assert registry.get_sample_value("poolscope_instance_capacity_requests",
                                     labels("learned")) is None
    name = line.split("{")[0]
    assert any(name in r.getMessage() and repr(float(absurd)) in r.getMessage()
               for r in caplog.records), caplog.text


async def test_a_billion_llamacpp_slots_cost_the_capacity_not_the_load(
        engine_server: EngineServer, make_exporter: MakeExporter,
        caplog: pytest.LogCaptureFixture) -> None:
    """/props is a document of its own, read by a collector of its own: its absurd
    `total_slots` fails that collector, the load is still read, and the capacity falls
    back to the learned one (never a billion, which would read the pool as idle)."""
    engine_server.body = fixture_text("llamacpp_busy")
    engine_server.props = swap((FIXTURES / "llamacpp_props.json").read_text(),
                               '"total_slots":2', '"total_slots":1000000000')
    exporter, registry = make_exporter(engine_metrics_url=engine_server.url)
    await exporter.loop.sample_all()
    src = labels("engine:llamacpp")
    assert registry.get_sample_value("poolscope_collector_success", health("engine")) == 1
    assert registry.get_sample_value("poolscope_engine_requests_running", src) == 2
    assert registry.get_sample_value("poolscope_collector_success",
                                     health("engine_capacity")) == 0
    assert registry.get_sample_value("poolscope_collector_errors_total",
                                     health("engine_capacity", reason="invalid_value")) == 1
    assert registry.get_sample_value("poolscope_instance_capacity_requests", src) is None
    assert registry.get_sample_value("poolscope_instance_capacity_requests",
                                     labels("learned")) == 2
    assert any("total_slots = 1000000000" in r.getMessage() for r in caplog.records), caplog.text


@pytest.mark.parametrize(("valid", "value", "holds"), [
    (RUNNING, 0, True), (RUNNING, MAX_INSTANCE_REQUESTS, True),
    (RUNNING, MAX_INSTANCE_REQUESTS + 1, False), (RUNNING, 2.5, False),
    (RUNNING, float("nan"), False), (RUNNING, -1, False),
    (SLOTS, 0, False), (SLOTS, 1, True), (SLOTS, 10**400, False),
])
def test_a_range_holds_whole_numbers_within_its_bounds(valid: Range, value: float,
                                                       holds: bool) -> None:
    assert valid.holds(value) is holds


def test_the_documented_ranges_are_the_code_s() -> None:
    """docs/reliability.md's "Plausible ranges" table, row for row, from the one home."""
    section = DOCS.read_text().split("## Plausible ranges", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (?!What|---)(.+?) \| (.+?) \|", section, re.MULTILINE)
    assert rows == [(r.what, str(r)) for r in RANGES]
