"""A real Prometheus scrapes every service's page, negotiates OpenMetrics (it asks for
it first) and ingests it: the page its own parser reads, not only client_python's."""

from __future__ import annotations

import asyncio
import json
import urllib.parse
import urllib.request
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from harness.prometheus import Prometheus, running_prometheus, scrape_config
from poolscope.contract import catalog
from poolscope.service import build
from tests.deploy.service_pages import PAGES, SERVICES, serving_page


def metadata(prom: Prometheus, metric: str) -> list[dict[str, Any]]:
    query = urllib.parse.urlencode({"metric": metric})
    with urllib.request.urlopen(f"{prom.url}/api/v1/metadata?{query}", timeout=10) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return list(body["data"].get(metric, []))


def scraped_by(workdir: Path, targets: dict[str, str]) -> None:
    jobs = [scrape_config(page, [target]) for page, target in targets.items()]
    with running_prometheus(workdir, jobs, rule_files=()) as running:
        every = "|".join(targets)
        running.wait_for(f'count(up{{job=~"{every}"}} == 1) == {len(targets)}')
        for page in SERVICES:
            running.wait_for(f'{build.NAME}{{job="{page}",version!=""}} == 1')
            running.wait_for(f'process_cpu_seconds_total{{job="{page}"}}')
        counter = catalog.HOST_NETWORK_RECEIVE.name
        running.wait_for(f'{counter}{{job="instance_exporter"}}')
        # In OpenMetrics a counter's family is named without `_total` (in the text
        # format 0.0.4 the TYPE line names the sample): the metadata says which was read.
        assert [m["type"] for m in metadata(running, counter.removesuffix("_total"))] == [
            "counter"]
        assert metadata(running, counter) == []


async def test_prometheus_ingests_every_page_as_openmetrics(tmp_path: Path) -> None:
    async with AsyncExitStack() as stack:
        targets = {}
        for page in PAGES:
            client = await stack.enter_async_context(serving_page(page))
            targets[page] = f"127.0.0.1:{client.server.port}"
        # Prometheus is driven from a thread: the pages are served by this event loop.
        await asyncio.to_thread(scraped_by, tmp_path, targets)
