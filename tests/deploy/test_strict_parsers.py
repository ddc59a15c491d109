"""Every service's /metrics passes client_python's strict parsers in the format it
negotiated: OpenMetrics 1.0.0 for a scraper that asks for it (Prometheus does),
the text format 0.0.4 for anyone else, both naming the same series.
(`test_promtool_pages.py` runs promtool over the same text pages.)"""

from __future__ import annotations

import math
import re

import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families as text_families
from prometheus_client.samples import Sample

from poolscope.service import build
from tests.deploy.service_pages import (
    EXPORTERS,
    OPENMETRICS_ACCEPT,
    PAGES,
    SERVICES,
    fetch,
    serving_page,
)

TEXT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}
# What a family of each type may name its samples (text format 0.0.4, as
# prometheus_client writes it: `_created` of counters and histograms as samples).
SUFFIXES = {"counter": ("_total", "_created"), "gauge": ("",),
            "histogram": ("_bucket", "_sum", "_count", "_created"),
            "summary": ("", "_sum", "_count", "_created"), "untyped": ("",)}
NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
# The process' own series describe the process, not a measured thing: no `source`.
ABOUT_THE_PROCESS = re.compile(rf"process_.+|{build.NAME}")
PROCESS_FAMILIES = {"process_cpu_seconds", "process_resident_memory_bytes",
                    "process_start_time_seconds", build.NAME}

SeriesKey = tuple[str, tuple[tuple[str, str], ...]]


def key(s: Sample) -> SeriesKey:
    return s.name, tuple(sorted(s.labels.items()))


def checked_text(page: str) -> tuple[set[str], set[SeriesKey]]:
    """The page read by the text parser with every family and sample checked;
    the family names and every sample's key."""
    names, keys = set(), set()
    for family in text_families(page):
        assert NAME.fullmatch(family.name), family.name
        assert family.name not in names, f"family {family.name} twice"
        names.add(family.name)
        assert family.type in TYPES, family
        assert family.documentation.strip(), f"{family.name} has no HELP"
        for s in family.samples:
            assert s.name in {family.name + x for x in SUFFIXES[family.type]}, (family.name, s)
            assert all(LABEL.fullmatch(k) and not k.startswith("__") for k in s.labels), s
            assert not math.isnan(s.value), s  # measured or absent, never NaN
            assert key(s) not in keys, f"sample twice: {s}"
            keys.add(key(s))
    return names, keys


def checked_openmetrics(page: str) -> tuple[set[str], set[SeriesKey]]:
    """The page read by the OpenMetrics parser, which refuses what the standard
    does (a clashing name, a missing `# EOF`, a bad histogram, a negative counter)."""
    assert page.endswith("\n# EOF\n") and page.count("# EOF") == 1, page[-200:]
    families = list(openmetrics_families(page))
    names = {f.name for f in families}
    assert len(names) == len(families)
    keys = [key(s) for f in families for s in f.samples]
    assert len(keys) == len(set(keys))
    return names, set(keys)


@pytest.mark.parametrize("service", PAGES)
async def test_the_text_page_passes_the_strict_text_parser(service: str) -> None:
    async with serving_page(service) as client:
        for accept in (None, "text/plain;version=0.0.4", "*/*"):
            content_type, vary, page = await fetch(client, accept)
            assert (content_type, vary) == (TEXT_TYPE, "Accept"), accept
            assert "# EOF" not in page
            names, _ = checked_text(page)
            if service in SERVICES:
                assert {n.removesuffix("_total") for n in names} >= PROCESS_FAMILIES, names


@pytest.mark.parametrize("service", PAGES)
async def test_an_openmetrics_scraper_gets_a_valid_openmetrics_page(service: str) -> None:
    async with serving_page(service) as client:
        content_type, vary, page = await fetch(client, OPENMETRICS_ACCEPT)
        assert (content_type, vary) == (OPENMETRICS_TYPE, "Accept")
        names, _ = checked_openmetrics(page)
        if service in SERVICES:
            assert names >= PROCESS_FAMILIES, names


@pytest.mark.parametrize("service", PAGES)
async def test_both_formats_name_the_same_series(service: str) -> None:
    async with serving_page(service) as client:
        await fetch(client)  # a bridge times its own /metrics: let that series exist first
        _, text_keys = checked_text((await fetch(client))[2])
        _, om_keys = checked_openmetrics((await fetch(client, OPENMETRICS_ACCEPT))[2])
    assert text_keys == om_keys
    assert len(text_keys) >= 20


@pytest.mark.parametrize("service", [*EXPORTERS, "proxy_exporter_embedded"])
async def test_every_exporter_series_names_its_source_but_the_process_own(
        service: str) -> None:
    """Every measurement names its source; `process_*` and `poolscope_build_info`
    describe the exporter process itself and stay as every exporter publishes them."""
    async with serving_page(service) as client:
        _, keys = checked_text((await fetch(client))[2])
    for name, labels in keys:
        if ABOUT_THE_PROCESS.fullmatch(name):
            assert "source" not in dict(labels), name
        else:
            assert dict(labels).get("source"), (name, labels)
    if service in EXPORTERS:
        assert {n for n, _ in keys if ABOUT_THE_PROCESS.fullmatch(n)} >= {
            "process_cpu_seconds_total", build.NAME}


@pytest.mark.parametrize("service", SERVICES)
async def test_build_info_names_this_build(service: str) -> None:
    async with serving_page(service) as client:
        _, keys = checked_text((await fetch(client))[2])
    [labels] = [dict(lb) for name, lb in keys if name == build.NAME]
    b = build.current()
    assert labels == {"version": b.version, "revision": b.revision, "python": b.python}
