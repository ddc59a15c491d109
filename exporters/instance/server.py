"""HTTP: /metrics for Prometheus, /healthz and /v1/resource/snapshot for the
Resource Agent's existing consumers.

Every handler reads held samples only; none of them waits on a device. /metrics
renders what samples set once per sampling round and format, however many servers
scrape, in the format the scraper negotiates (`poolscope.exporters.common.exposition`).
Its families are the catalog's, every series naming its `source`, plus the process'
own: `process_*` and `poolscope_build_info` describe the exporter process, not the
Instance it measures, so they stay as every exporter publishes them, without
`source` or identity labels. What one client may send or hold, and who may read, is
`poolscope.service`'s (`listener`, `auth`), shared with the bridges.
"""

from __future__ import annotations

import itertools

from aiohttp import web

from poolscope.exporters.common.exposition import (
    RoundCache,
    metrics_handler,
    process_collectors,
)
from poolscope.exporters.instance import snapshot
from poolscope.exporters.instance.service import InstanceExporter
from poolscope.service.web import Exposure

EXPORTER_KEY: web.AppKey[InstanceExporter] = web.AppKey("exporter", InstanceExporter)
PAGE_KEY: web.AppKey[RoundCache] = web.AppKey("page", RoundCache)


async def _healthz(request: web.Request) -> web.Response:
    exporter = request.app[EXPORTER_KEY]
    return web.json_response({"status": "ok", "instance_id": exporter.settings.instance_id})


async def _snapshot(request: web.Request) -> web.Response:
    return web.json_response(snapshot.build(request.app[EXPORTER_KEY]), dumps=snapshot.dumps)


def make_app(exporter: InstanceExporter, exposure: Exposure | None = None) -> web.Application:
    exposure = exposure or Exposure()
    app = web.Application(middlewares=exposure.middlewares())
    app[EXPORTER_KEY] = exporter
    build, process = process_collectors()
    # The process' CPU and memory ride in the cached part with the build: read once per
    # sampling round (at most one interval old, a counter still rising), not once per
    # scraper, since ten scrapers a second made them a tenth of the exporter's CPU.
    page = app[PAGE_KEY] = RoundCache(
        exporter.round_key,
        lambda: itertools.chain(exporter.sampled_families(), build.collect(),
                                process.collect()),
        exporter.scrape_time_families)
    app.router.add_get(exposure.telemetry_path, metrics_handler(page.page))
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/v1/resource/snapshot", _snapshot)
    return app
