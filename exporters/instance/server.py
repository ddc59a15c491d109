"""HTTP: /metrics for Prometheus, /healthz and /v1/resource/snapshot for the
Resource Agent's existing consumers (seed 001).

Every handler reads held samples only; none of them waits on a device. What one
client may send or hold, and who may read, is `exporters.common.web`'s, shared
with the bridges.
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from exporters.common.web import guarded
from exporters.instance import snapshot
from exporters.instance.service import InstanceExporter

EXPORTER_KEY: web.AppKey[InstanceExporter] = web.AppKey("exporter", InstanceExporter)
_REGISTRY_KEY: web.AppKey[CollectorRegistry] = web.AppKey("registry", CollectorRegistry)


async def _metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[_REGISTRY_KEY])
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _healthz(request: web.Request) -> web.Response:
    exporter = request.app[EXPORTER_KEY]
    return web.json_response({"status": "ok", "instance_id": exporter.settings.instance_id})


async def _snapshot(request: web.Request) -> web.Response:
    return web.json_response(snapshot.build(request.app[EXPORTER_KEY]), dumps=snapshot.dumps)


def make_app(exporter: InstanceExporter, auth_token: str | None = None) -> web.Application:
    app = web.Application(middlewares=guarded(auth_token))
    app[EXPORTER_KEY] = exporter
    app[_REGISTRY_KEY] = exporter.registry()
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/v1/resource/snapshot", _snapshot)
    return app
