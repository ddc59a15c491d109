"""The Scheduler bridge's HTTP face: every pool's summary, one pool's, their provenance,
and for people the status pages and their drill-down, on the skeleton both bridges
share (`poolscope.bridge.app`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

from aiohttp import web
from prometheus_client import CollectorRegistry

from poolscope.bridge.app import CACHE, Settings, bridge_app, snapshot_or_error
from poolscope.bridge.cache import Source
from poolscope.bridge.http_cache import answer, rendered
from poolscope.bridge.metrics import BridgeMetrics
from poolscope.bridge.promapi import PrometheusAPI
from poolscope.bridge.queries import EVERY_POOL_EVALUATED, read_snapshot, rollups_written_at
from poolscope.bridge.sources import describe_sources
from poolscope.bridge.summary import SCHEMA_VERSION, encode_json
from poolscope.scheduler_bridge.status.page import add_status_routes
from poolscope.service.identity import ID_RULE, valid_id
from poolscope.service.middleware import json_error

NAMESPACE = "poolscope_scheduler_bridge"


def create_app(settings: Settings, *, registry: CollectorRegistry | None = None,
               clock: Callable[[], float] = time.time) -> web.Application:
    """The application; `registry` and `clock` are injectable for tests."""
    registry = registry if registry is not None else CollectorRegistry()

    def every_pool(app: web.Application, api: PrometheusAPI) -> Source:
        return Source(partial(read_snapshot, api.samples, shards=settings.query_shards,
                              evaluated=EVERY_POOL_EVALUATED),
                      partial(rollups_written_at, api.samples, evaluated=EVERY_POOL_EVALUATED))

    app = bridge_app(settings, BridgeMetrics(registry, namespace=NAMESPACE), registry,
                     every_pool, clock=clock)
    app.router.add_get("/debug/proxy_pool_resources", all_pools)
    # [^/]+ rather than the default [^{}/]+: braces reach the check and get a 400.
    app.router.add_get("/v1/pool_resources/{proxy_id:[^/]+}", one_pool)
    app.router.add_get("/debug/pool_resource_sources", pool_resource_sources)
    add_status_routes(app, lambda: app[CACHE].get())
    return app


# --- routes -------------------------------------------------------------------

async def all_pools(request: web.Request) -> web.Response:
    served = await snapshot_or_error(request)
    if isinstance(served, web.Response):
        return served
    snapshot = served.snapshot
    # Nothing in it changes between two requests for one snapshot (its age is in the
    # headers): rendered once, however many Schedulers ask.
    body = rendered(served, "pools", lambda: encode_json({
        "schema_version": SCHEMA_VERSION, "generated_at": snapshot.generated_at,
        "rollups_at": snapshot.rollups_at, "stale": served.stale, "pools": snapshot.pools}))
    return await answer(request, served, body)


async def one_pool(request: web.Request) -> web.Response:
    proxy_id = request.match_info["proxy_id"]
    # Only ever a dict key here, never part of a query; anything outside the shared
    # charset is refused before it reaches a log or a lookup.
    if not valid_id(proxy_id):
        return json_error(400, f"invalid proxy_id: expected {ID_RULE}")
    served = await snapshot_or_error(request)
    if isinstance(served, web.Response):
        return served
    summary = served.snapshot.pools.get(proxy_id)
    if summary is None:
        return json_error(404, "unknown proxy_id: no proxy_pool: series carries it",
                          proxy_id=proxy_id)
    return await answer(request, served,
                        rendered(served, ("pool", proxy_id), lambda: encode_json(summary)))


async def pool_resource_sources(request: web.Request) -> web.Response:
    served = await snapshot_or_error(request)
    if isinstance(served, web.Response):
        return served

    def render() -> bytes:
        doc = describe_sources(served.snapshot)
        doc.update(stale=served.stale)
        return encode_json(doc)

    return await answer(request, served, rendered(served, "sources", render))
