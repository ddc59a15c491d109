"""The Instance exporter scraped by ten scrapers at once, as several Prometheus servers
would: every scrape a 200 with a whole exposition that parses and holds the
same series as the one before the load. The CPU it costs is bench/exporter_scrape_load.py's
to measure; nothing here times anything.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench.exporter_scrape_load import exporter_process, scrape_at_rate
from harness.polling import eventually
from harness.static_http import serving_fixture
from poolscope.contract import catalog

pytestmark = pytest.mark.integration

SCRAPERS = 10
INTERVAL_S = 0.5
DURATION_S = 3.0
# What every scrape must hold once the exporter has sampled twice: the vLLM fixture's
# engine series, and host CPU, a rate between two samples (absent after the first).
EXPECTED = {catalog.ENGINE_REQUESTS_RUNNING.name, catalog.ENGINE_REQUESTS_WAITING.name,
            catalog.ENGINE_KV_CACHE_USAGE.name, catalog.HOST_CPU_UTILIZATION.name}

SeriesKey = tuple[str, tuple[tuple[str, str], ...]]


def series_set(body: bytes) -> frozenset[SeriesKey]:
    """Every sample's name and labels; raises ValueError when the text does not parse."""
    text = body.decode()
    if not text.endswith("\n"):
        raise ValueError("exposition does not end with a newline: cut short")
    return frozenset((s.name, tuple(sorted(s.labels.items())))
                     for family in text_string_to_metric_families(text)
                     for s in family.samples)


@pytest.fixture
def exporter_url() -> Iterator[str]:
    with serving_fixture("vllm") as engine_url, \
            exporter_process(engine_url, "load-0") as exporter:
        yield f"{exporter.base_url}/metrics"


async def test_ten_concurrent_scrapers_get_whole_identical_expositions(
        exporter_url: str) -> None:
    def scrape() -> frozenset[SeriesKey]:
        with urllib.request.urlopen(exporter_url, timeout=10) as resp:
            return series_set(resp.read())

    reference = eventually(scrape, lambda s: {name for name, _ in s} >= EXPECTED,
                           timeout=10, what="a second sample")
    # Every series names its source but the process' own (`process_*`, build info).
    assert all(dict(labels).get("source") for name, labels in reference
               if not name.startswith("process_") and name != "poolscope_build_info")

    def same_series(body: bytes) -> str | None:
        try:
            seen = series_set(body)
        except ValueError as e:
            return f"unparsable: {e}"
        if seen != reference:
            return f"series differ: +{sorted(seen - reference)} -{sorted(reference - seen)}"
        return None

    scrapes = await scrape_at_rate(exporter_url, SCRAPERS, INTERVAL_S, DURATION_S,
                                   check=same_series)
    assert not scrapes.errors
    assert scrapes.ok == SCRAPERS * int(DURATION_S / INTERVAL_S)
