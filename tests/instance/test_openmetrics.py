"""Format negotiation on /metrics, and the Instance exporter's page cached once per
sampling round and format, with its scrape-time tail before the one `# EOF`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families as text_families

from poolscope.bridge.app import Settings, bridge_app
from poolscope.bridge.cache import Source
from poolscope.bridge.metrics import BridgeMetrics
from poolscope.contract import catalog
from poolscope.exporters.common.exposition import (
    OPENMETRICS,
    TEXT,
    RoundCache,
    ScrapePage,
    negotiate,
)
from poolscope.exporters.instance.server import PAGE_KEY, make_app
from poolscope.exporters.instance.service import InstanceExporter
from poolscope.service.web import Exposure
from tests.instance.conftest import EngineServer, MakeExporter, fixture_text

Client = TestClient[Any, Any]

# The Accept headers real scrapers send. Prometheus builds its header in
# scrape/scrape.go (`acceptHeader`) from config.ScrapeProtocolsHeaders, weighting the
# configured protocols from q=0.<n+1> down, then `*/*`.
PROMETHEUS_2_42 = ("application/openmetrics-text;version=1.0.0,"
                   "application/openmetrics-text;version=0.0.1;q=0.75,"
                   "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
PROMETHEUS_2_49 = ("application/openmetrics-text;version=1.0.0;q=0.5,"
                   "application/openmetrics-text;version=0.0.1;q=0.4,"
                   "text/plain;version=0.0.4;q=0.3,*/*;q=0.2")
PROMETHEUS_3 = ("application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
                "application/openmetrics-text;version=0.0.1;q=0.5,"
                "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,"
                "text/plain;version=0.0.4;q=0.3,*/*;q=0.2")
PROMETHEUS_PROTO_FIRST = (
    "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
    "encoding=delimited;q=0.6,application/openmetrics-text;version=1.0.0;q=0.5,"
    "application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,"
    "*/*;q=0.2")
PROMETHEUS_TEXT_ONLY = "text/plain;version=0.0.4;q=0.6,*/*;q=0.5"  # scrape_protocols: text
METRICBEAT = "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"

PROMETHEUS = (PROMETHEUS_2_42, PROMETHEUS_2_49, PROMETHEUS_3, PROMETHEUS_PROTO_FIRST)
ASKS_FOR_OPENMETRICS = (*PROMETHEUS, "application/openmetrics-text",
                        "application/openmetrics-text;version=",
                        "application/openmetrics-text;version=2.0.0",
                        "text/html, application/openmetrics-text; version=1.0.0; q=0.9",
                        "Application/OpenMetrics-Text; Version=1.0.0")  # RFC 9110: any case
ASKS_FOR_TEXT = (None, "", "*/*", METRICBEAT, PROMETHEUS_TEXT_ONLY, "text/plain",
                 "text/plain;version=1.0.0", "application/json",
                 "application/openmetrics-text;version=0.0.1")


@pytest.mark.parametrize("accept", ASKS_FOR_OPENMETRICS)
def test_a_scraper_asking_for_openmetrics_gets_it(accept: str) -> None:
    assert negotiate(accept) is OPENMETRICS


@pytest.mark.parametrize("accept", [*PROMETHEUS, METRICBEAT, PROMETHEUS_TEXT_ONLY, "*/*"])
def test_every_real_scraper_gets_the_format_prometheus_client_would_serve(accept: str) -> None:
    content_type = choose_encoder(accept)[1]
    assert negotiate(accept).content_type.split(";")[0] == content_type.split(";")[0]


@pytest.mark.parametrize("accept", ASKS_FOR_TEXT)
def test_anyone_else_gets_the_text_format(accept: str | None) -> None:
    assert negotiate(accept) is TEXT


@pytest.mark.parametrize("accept", [
    "application/openmetrics-text;q=0",
    "application/openmetrics-text;version=1.0.0;q=0.0, text/plain",
    "application/openmetrics-text;version=abc",
    "application/openmetrics-text;version=1.0.0;q=high",
    ";;,,=;",
])
def test_a_refused_or_malformed_openmetrics_range_gets_the_text_format(accept: str) -> None:
    assert negotiate(accept) is TEXT


@pytest.mark.parametrize(("accept", "expected"), [
    # Prometheus with scrape_protocols [PrometheusText0.0.4, OpenMetricsText1.0.0]
    ("text/plain;version=0.0.4;q=0.5,application/openmetrics-text;version=1.0.0;q=0.4,"
     "*/*;q=0.1", "text"),
    ("text/plain;q=0.3,application/openmetrics-text;version=1.0.0;q=0.9", "openmetrics"),
    ("application/openmetrics-text;version=1.0", "openmetrics"),  # 1.0 is 1.0.0
    ("application/openmetrics-text;version=0.0.1", "text"),
])
def test_the_weights_decide(accept: str, expected: str) -> None:
    assert negotiate(accept) is {"text": TEXT, "openmetrics": OPENMETRICS}[expected]


# --- RoundCache, one rendering per format and round ------------------------------

class Held:
    def __init__(self) -> None:
        self.key = 0
        self.value = 1.0
        self.now = 0.0

    def sampled(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("held_value", "What the last sample set.", value=self.value)
        yield CounterMetricFamily("held_reads", "Reads so far.", value=3)

    def scrape_time(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("held_age_seconds", "Measured per page.", value=self.now)


def test_each_format_is_rendered_once_per_round() -> None:
    held = Held()
    cache = RoundCache(lambda: held.key, held.sampled, held.scrape_time)
    pages = [cache.page(fmt) for fmt in (TEXT, OPENMETRICS, TEXT, OPENMETRICS)]
    assert cache.renders == 2
    assert pages[0] == pages[2] and pages[1] == pages[3]
    held.key, held.value = 1, 2.0
    cache.page(OPENMETRICS)
    cache.page(OPENMETRICS)
    assert cache.renders == 3
    assert cache.page(TEXT).count(b"held_value 2.0") == 1
    assert cache.renders == 4


def test_the_openmetrics_page_ends_once_after_its_fresh_tail() -> None:
    held = Held()
    cache = RoundCache(lambda: held.key, held.sampled, held.scrape_time)
    cache.page(OPENMETRICS)
    held.now = 7.0
    page = cache.page(OPENMETRICS).decode()
    assert page.endswith("held_age_seconds 7.0\n# EOF\n") and page.count("# EOF") == 1
    families = {f.name: f for f in openmetrics_families(page)}
    assert families["held_reads"].samples[0].name == "held_reads_total"
    assert families["held_age_seconds"].samples[0].value == 7.0


def test_the_text_page_has_no_terminator_and_parses() -> None:
    held = Held()
    page = RoundCache(lambda: held.key, held.sampled, held.scrape_time).page(TEXT).decode()
    assert "# EOF" not in page
    assert {f.name for f in text_families(page)} == {
        "held_value", "held_reads", "held_age_seconds"}


def test_a_scrape_page_renders_every_collector_in_either_format() -> None:
    registry = CollectorRegistry()
    held = Held()

    class Sampled:
        def collect(self) -> Iterator[Metric]:
            return held.sampled()

    registry.register(Sampled())  # type: ignore[arg-type]
    page = ScrapePage(registry)
    assert page.page(OPENMETRICS).endswith(b"held_reads_total 3.0\n# EOF\n")
    assert b"# EOF" not in page.page(TEXT)


# --- the Instance exporter's /metrics ---------------------------------------------

@pytest.fixture
async def exporter(engine_server: EngineServer, make_exporter: MakeExporter
                   ) -> InstanceExporter:
    engine_server.body = fixture_text("vllm")
    made, _ = make_exporter(engine_metrics_url=engine_server.url)
    await made.loop.sample_all()
    return made


@pytest.fixture
async def app(exporter: InstanceExporter) -> AsyncIterator[tuple[web.Application, Client]]:
    application = make_app(exporter)
    client: Client = TestClient(TestServer(application))
    await client.start_server()
    yield application, client
    await client.close()


async def scrape(client: Client, accept: str | None = None, path: str = "/metrics"
                 ) -> tuple[str, str]:
    resp = await client.get(path, headers={"Accept": accept} if accept else {})
    assert resp.status == 200
    assert resp.headers["Vary"] == "Accept"
    return resp.headers["Content-Type"], await resp.text()


async def test_prometheus_gets_openmetrics_and_curl_the_text_format(
        app: tuple[web.Application, Client]) -> None:
    _, client = app
    content_type, page = await scrape(client, PROMETHEUS_2_42)
    assert content_type == "application/openmetrics-text; version=1.0.0; charset=utf-8"
    families = {f.name: f for f in openmetrics_families(page)}
    rx = families[catalog.HOST_NETWORK_RECEIVE.name.removesuffix("_total")]
    assert rx.type == "counter" and rx.samples[0].name == catalog.HOST_NETWORK_RECEIVE.name
    content_type, page = await scrape(client)
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    [rx] = [f for f in text_families(page) if f.samples
            and f.samples[0].name == catalog.HOST_NETWORK_RECEIVE.name]
    assert rx.type == "counter"


async def test_the_instance_page_is_rendered_once_per_round_and_format(
        exporter: InstanceExporter, app: tuple[web.Application, Client]) -> None:
    application, client = app
    for accept in (None, PROMETHEUS_3, None, PROMETHEUS_3):
        await scrape(client, accept)
    assert application[PAGE_KEY].renders == 2
    assert exporter.engine is not None
    await exporter.loop.sample(exporter.engine)
    await scrape(client, PROMETHEUS_3)
    await scrape(client)
    assert application[PAGE_KEY].renders == 4


async def test_the_process_series_are_read_once_per_round_before_the_end(
        app: tuple[web.Application, Client]) -> None:
    _, client = app
    _, page = await scrape(client, PROMETHEUS_3)
    lines = page.splitlines()
    assert lines[-1] == "# EOF" and page.count("# EOF") == 1
    names = [f.name for f in openmetrics_families(page)]
    # the sampled part (build info and the process' own series in it), then the ages
    assert names.index("poolscope_build_info") < names.index(
        "process_cpu_seconds") < names.index(catalog.COLLECTOR_SAMPLE_AGE.name)
    # cached with the round: a second scrape in the same round serves the same values
    _, again = await scrape(client, PROMETHEUS_3)
    assert [ln for ln in again.splitlines() if ln.startswith("process_")] == [
        ln for ln in lines if ln.startswith("process_")]


async def test_accept_headers_sent_apart_are_read_as_one_list(
        app: tuple[web.Application, Client]) -> None:
    _, client = app
    resp = await client.get("/metrics", headers=[("Accept", "text/html"),
                                                 ("Accept", "application/openmetrics-text")])
    assert resp.headers["Content-Type"] == OPENMETRICS.content_type
    assert (await resp.text()).endswith("# EOF\n")


@pytest.mark.parametrize("accept", [None, PROMETHEUS_2_42])
async def test_the_page_is_served_at_the_telemetry_path(
        exporter: InstanceExporter, accept: str | None) -> None:
    app = make_app(exporter, Exposure(telemetry_path="/x/telemetry"))
    client: Client = TestClient(TestServer(app))
    await client.start_server()
    try:
        _, page = await scrape(client, accept, path="/x/telemetry")
        assert catalog.ENGINE_REQUESTS_RUNNING.name in page
        assert (await client.get("/metrics")).status == 404
    finally:
        await client.close()


async def test_the_bridges_serve_their_page_at_the_telemetry_path() -> None:
    registry = CollectorRegistry()
    metrics = BridgeMetrics(registry, namespace="poolscope_test_bridge")

    async def unread(_: float) -> Any:
        raise AssertionError("no test here reads a snapshot")

    def source_for(_: web.Application, __: object) -> Source:
        return Source(unread, unread)

    application = bridge_app(Settings(backends=("http://127.0.0.1:9",),
                                      exposure=Exposure(telemetry_path="/own/metrics")),
                             metrics, registry, source_for, clock=lambda: 0.0)
    client: Client = TestClient(TestServer(application))
    await client.start_server()
    try:
        content_type, page = await scrape(client, PROMETHEUS_2_49, path="/own/metrics")
        assert content_type.startswith("application/openmetrics-text")
        assert "poolscope_test_bridge_snapshot_pools" in {
            f.name for f in openmetrics_families(page)}
        assert (await client.get("/metrics")).status == 404
    finally:
        await client.close()
