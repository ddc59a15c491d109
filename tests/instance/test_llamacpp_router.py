"""llama.cpp in router mode: one llama-server serving several models, each read as
an Instance of its own through /metrics?model=NAME, never loading a model by reading.

The fake router answers with the pages and error bodies captured from the real one
(tests/live/capture_router_pages.py) and decides as its source does
(tools/server/server-models.cpp: router_validate_model, is_autoload): no `model`
is a 400, a model not loaded is a 400 unless the request autoloads it, which a
request does by default.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from poolscope.exporters.instance.engine import engine_url
from poolscope.exporters.instance.service import InstanceExporter
from tests.instance.conftest import FIXTURES, MakeExporter, health, labels, names, serve

MODEL = "tiny"


def _capture(name: str) -> str:
    return (FIXTURES / f"llamacpp_router_{name}").read_text()


@dataclass
class FakeRouter:
    url: str = ""
    loaded: bool = False
    # Every query the router was asked, to check what the exporter sends.
    queries: list[dict[str, str]] = field(default_factory=list)

    def _answer(self, request: web.Request, own: web.Response, page: str,
                content_type: str) -> web.Response:
        query = dict(request.query)
        self.queries.append(query)
        if "model" not in query:
            return own
        if query["model"] != MODEL:
            return web.Response(status=400, text="unknown model")
        if query.get("autoload", "true") in ("true", "1"):  # the router's default: load it
            self.loaded = True
        if not self.loaded:
            return web.Response(status=400, text=_capture("not_loaded.json"),
                                content_type="application/json")
        return web.Response(text=page, content_type=content_type)

    async def metrics(self, request: web.Request) -> web.Response:
        missing = web.Response(status=400, text=_capture("no_model.json"),
                               content_type="application/json")
        return self._answer(request, missing, _capture("model.txt"), "text/plain")

    async def props(self, request: web.Request) -> web.Response:
        own = web.Response(text=_capture("props.json"), content_type="application/json")
        return self._answer(request, own, _capture("model_props.json"), "application/json")


@pytest.fixture
async def router() -> AsyncIterator[FakeRouter]:
    fake = FakeRouter()
    app = web.Application()
    app.router.add_get("/metrics", fake.metrics)
    app.router.add_get("/props", fake.props)
    runner, fake.url = await serve(app)
    yield fake
    await runner.cleanup()


def _engine_failure(exporter: InstanceExporter) -> str | None:
    reason = next(h.last_reason for h in exporter.board if h.name == "engine")
    return reason.value if reason else None


async def test_a_loaded_model_is_read_with_its_own_slots_and_never_autoloaded(
        router: FakeRouter, make_exporter: MakeExporter) -> None:
    router.loaded = True
    exporter, registry = make_exporter(engine_metrics_url=f"{router.url}/metrics?model={MODEL}")
    await exporter.loop.sample_all()
    src = labels("engine:llamacpp")
    assert registry.get_sample_value("poolscope_engine_requests_running", src) == 0
    assert registry.get_sample_value("poolscope_engine_generation_tokens_total", src) == 20
    assert registry.get_sample_value("poolscope_engine_prompt_tokens_total", src) == 5
    # The model's own /props (its child's 2 slots), not the router's, which has none.
    assert registry.get_sample_value("poolscope_instance_capacity_requests", src) == 2
    assert router.queries == [{"model": MODEL, "autoload": "false"}] * 2


async def test_reading_an_unloaded_model_does_not_load_it(
        router: FakeRouter, make_exporter: MakeExporter) -> None:
    exporter, registry = make_exporter(engine_metrics_url=f"{router.url}/metrics?model={MODEL}")
    await exporter.loop.sample_all()
    assert not router.loaded
    # Not loaded: not measured. The read fails with what the router said.
    assert registry.get_sample_value("poolscope_collector_success", health("engine")) == 0
    assert _engine_failure(exporter) == "http_status"
    assert "poolscope_engine_requests_running" not in names(registry)

    router.loaded = True  # a client's request loaded it
    await exporter.loop.sample_all()
    assert registry.get_sample_value("poolscope_collector_success", health("engine")) == 1


async def test_a_router_url_without_a_model_fails_saying_so(
        router: FakeRouter, make_exporter: MakeExporter,
        caplog: pytest.LogCaptureFixture) -> None:
    exporter, registry = make_exporter(engine_metrics_url=f"{router.url}/metrics")
    await exporter.loop.sample_all()
    assert registry.get_sample_value("poolscope_collector_success", health("engine")) == 0
    assert _engine_failure(exporter) == "http_status"
    assert f"{router.url}/metrics: HTTP 400" in caplog.text
    assert "model name is missing from the request" in caplog.text


@pytest.mark.parametrize(("given", "read"), [
    ("http://h:8080/metrics", "http://h:8080/metrics"),
    ("http://h:8080/metrics?model=tiny", "http://h:8080/metrics?model=tiny&autoload=false"),
    ("http://h:8080/metrics?model=org%2Fm%3AQ4", "http://h:8080/metrics?model=org%2Fm%3AQ4"
     "&autoload=false"),
    ("http://h:8080/metrics?autoload=false&model=tiny",
     "http://h:8080/metrics?autoload=false&model=tiny"),
])
def test_a_url_naming_a_model_reads_without_autoload(given: str, read: str) -> None:
    assert engine_url(given) == read


@pytest.mark.parametrize("autoload", ["true", "1"])
def test_a_url_asking_for_autoload_is_refused(autoload: str) -> None:
    with pytest.raises(ValueError, match="autoload"):
        engine_url(f"http://h:8080/metrics?model=tiny&autoload={autoload}")
