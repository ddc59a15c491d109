"""/metrics rendered once per sampling round: cached bytes between samples, never
a stale page after one, and nothing lost against rendering every family per scrape."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from poolscope.contract import catalog
from poolscope.exporters.common.exposition import RoundCache
from poolscope.exporters.instance.server import make_app
from poolscope.exporters.instance.service import InstanceExporter
from tests.instance.conftest import EngineServer, MakeExporter, fixture_text, labels

AGE = catalog.COLLECTOR_SAMPLE_AGE.name
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(page: bytes) -> Samples:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(page.decode())
            for s in family.samples}


def without_ages(page: bytes) -> bytes:
    return b"".join(line for line in page.splitlines(keepends=True) if AGE.encode() not in line)


def value(page: bytes, family: catalog.Family, **label_values: str) -> float | None:
    wanted = tuple(sorted(label_values.items()))
    return samples(page).get((family.name, wanted))


# --- RoundCache on its own --------------------------------------------------------

class Held:
    """A scripted state: `value` is what a sample set, `key` what a sample bumps."""

    def __init__(self) -> None:
        self.key = 0
        self.value = 1.0
        self.collected = 0
        self.now = 0.0

    def sampled(self) -> Iterator[Metric]:
        self.collected += 1
        yield GaugeMetricFamily("held_value", "What the last sample set.", value=self.value)

    def scrape_time(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("held_age_seconds", "Measured per page.", value=self.now)


def test_pages_of_one_round_share_one_rendering_and_keep_a_fresh_tail() -> None:
    held = Held()
    cache = RoundCache(lambda: held.key, held.sampled, held.scrape_time)
    first = cache.page()
    held.value = 2.0  # changed without a new key: the cache may not notice, by contract
    held.now = 5.0
    second = cache.page()
    assert held.collected == 1 and cache.renders == 1
    assert samples(first) == {("held_value", ()): 1.0, ("held_age_seconds", ()): 0.0}
    assert samples(second) == {("held_value", ()): 1.0, ("held_age_seconds", ()): 5.0}


def test_a_new_key_renders_the_new_values() -> None:
    held = Held()
    cache = RoundCache(lambda: held.key, held.sampled, held.scrape_time)
    cache.page()
    held.value, held.key = 3.0, 1
    assert samples(cache.page())[("held_value", ())] == 3.0
    assert cache.renders == 2


def test_the_page_is_what_one_rendering_of_every_family_would_be() -> None:
    held = Held()
    held.now = 0.25

    class Both(Collector):
        def collect(self) -> Iterator[Metric]:
            yield from held.sampled()
            yield from held.scrape_time()

    cache = RoundCache(lambda: held.key, held.sampled, held.scrape_time)
    assert cache.page() == generate_latest(Both())


# --- the Instance exporter's /metrics ---------------------------------------------

@pytest.fixture
async def vllm_exporter(engine_server: EngineServer,
                        make_exporter: MakeExporter) -> InstanceExporter:
    engine_server.body = fixture_text("vllm")
    exporter, _ = make_exporter(engine_metrics_url=engine_server.url)
    await exporter.loop.sample_all()
    return exporter


@pytest.fixture
async def scrape(vllm_exporter: InstanceExporter) -> AsyncIterator[TestClient]:  # type: ignore[type-arg]
    client = TestClient(TestServer(make_app(vllm_exporter)))
    await client.start_server()
    yield client
    await client.close()


async def get_page(client: TestClient, **headers: str) -> bytes:  # type: ignore[type-arg]
    resp = await client.get("/metrics", headers=headers)
    assert resp.status == 200
    return await resp.read()


async def test_scrapes_within_a_round_get_the_same_sampled_bytes(
        scrape: TestClient) -> None:  # type: ignore[type-arg]
    first, second = await get_page(scrape), await get_page(scrape)
    assert without_ages(first) == without_ages(second)
    assert value(second, catalog.ENGINE_REQUESTS_RUNNING, **labels("engine:vllm")) == 37
    ages = {k: v for k, v in samples(second).items() if k[0] == AGE}
    assert {dict(k[1])["collector"] for k in ages} == {"host", "gpu", "engine"}
    assert all(v >= 0 for v in ages.values())


async def test_the_page_holds_every_series_the_registry_does(
        vllm_exporter: InstanceExporter, scrape: TestClient) -> None:  # type: ignore[type-arg]
    page = samples(await get_page(scrape))
    full = samples(generate_latest(vllm_exporter.registry()))
    # ... and the process' own series, which the exporter's registry does not hold
    own = {k for k in page if k[0].startswith("process_") or k[0] == "poolscope_build_info"}
    assert {k[0] for k in own} >= {"process_cpu_seconds_total", "poolscope_build_info"}
    page = {k: v for k, v in page.items() if k not in own}
    assert page.keys() == full.keys()
    assert {k: v for k, v in page.items() if k[0] != AGE} == {
        k: v for k, v in full.items() if k[0] != AGE}


async def test_a_gzip_accepting_scraper_gets_the_plain_page(
        scrape: TestClient) -> None:  # type: ignore[type-arg]
    resp = await scrape.get("/metrics", headers={"Accept-Encoding": "gzip"},
                            auto_decompress=False)
    assert "Content-Encoding" not in resp.headers
    assert value(await resp.read(), catalog.ENGINE_REQUESTS_WAITING,
                 **labels("engine:vllm")) == 12


async def test_a_new_engine_sample_shows_on_the_next_scrape(
        engine_server: EngineServer, vllm_exporter: InstanceExporter,
        scrape: TestClient) -> None:  # type: ignore[type-arg]
    await get_page(scrape)
    engine_server.body = fixture_text("vllm").replace(
        'vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 37',
        'vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 41')
    assert vllm_exporter.engine is not None
    await vllm_exporter.loop.sample(vllm_exporter.engine)
    page = await get_page(scrape)
    assert value(page, catalog.ENGINE_REQUESTS_RUNNING, **labels("engine:vllm")) == 41


async def test_a_failed_sample_drops_the_cached_series(
        engine_server: EngineServer, vllm_exporter: InstanceExporter,
        scrape: TestClient) -> None:  # type: ignore[type-arg]
    await get_page(scrape)
    engine_server.status = 500
    assert vllm_exporter.engine is not None
    await vllm_exporter.loop.sample(vllm_exporter.engine)
    page = await get_page(scrape)
    assert value(page, catalog.ENGINE_REQUESTS_RUNNING, **labels("engine:vllm")) is None
    assert value(page, catalog.COLLECTOR_SUCCESS,
                 **labels(catalog.SOURCE_EXPORTER, collector="engine")) == 0


async def test_draining_shows_on_the_next_scrape_without_a_sample(
        vllm_exporter: InstanceExporter, scrape: TestClient) -> None:  # type: ignore[type-arg]
    def state(page: bytes, name: str) -> float | None:
        return value(page, catalog.INSTANCE_ADMISSION_STATE, **labels("derived", state=name))

    assert state(await get_page(scrape), "draining") == 0
    vllm_exporter.admission.draining = True
    assert state(await get_page(scrape), "draining") == 1
