"""HTTP: /metrics for Prometheus, /healthz and /v1/resource/snapshot for the
Resource Agent's existing consumers.

Every handler reads held samples only; none of them waits on a device. /metrics
renders what samples set once per sampling round, however many servers scrape
(`poolscope.exporters.common.exposition`). What one client may send or hold, and who may
read, is `poolscope.service.web`'s, shared with the bridges.
"""

from __future__ import annotations

from aiohttp import hdrs, web
from prometheus_client import CONTENT_TYPE_LATEST

from poolscope.exporters.common.exposition import RoundCache
from poolscope.exporters.instance import snapshot
from poolscope.exporters.instance.service import InstanceExporter
from poolscope.service.web import guarded

EXPORTER_KEY: web.AppKey[InstanceExporter] = web.AppKey("exporter", InstanceExporter)
_PAGE_KEY: web.AppKey[RoundCache] = web.AppKey("page", RoundCache)
_TEXT = {hdrs.CONTENT_TYPE: CONTENT_TYPE_LATEST}


async def _metrics(request: web.Request) -> web.Response:
    return web.Response(body=request.app[_PAGE_KEY].page(), headers=_TEXT)


async def _healthz(request: web.Request) -> web.Response:
    exporter = request.app[EXPORTER_KEY]
    return web.json_response({"status": "ok", "instance_id": exporter.settings.instance_id})


async def _snapshot(request: web.Request) -> web.Response:
    return web.json_response(snapshot.build(request.app[EXPORTER_KEY]), dumps=snapshot.dumps)


def make_app(exporter: InstanceExporter, auth_token: str | None = None) -> web.Application:
    app = web.Application(middlewares=guarded(auth_token))
    app[EXPORTER_KEY] = exporter
    app[_PAGE_KEY] = RoundCache(exporter.round_key, exporter.sampled_families,
                                exporter.scrape_time_families)
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/v1/resource/snapshot", _snapshot)
    return app
