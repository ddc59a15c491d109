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

from poolscope.bridge.app import CACHE, Settings, bridge_app, freshness_headers, snapshot_or_error
from poolscope.bridge.cache import Source
from poolscope.bridge.metrics import BridgeMetrics
from poolscope.bridge.promapi import PrometheusAPI
from poolscope.bridge.queries import read_snapshot, rollups_written_at
from poolscope.bridge.sources import describe_sources
from poolscope.bridge.summary import SCHEMA_VERSION, encode_json
from poolscope.scheduler_bridge.status.page import add_status_routes
from poolscope.service.identity import ID_RULE, valid_id
from poolscope.service.web import json_error

NAMESPACE = "poolscope_scheduler_bridge"


def create_app(settings: Settings, *, registry: CollectorRegistry | None = None,
               clock: Callable[[], float] = time.time) -> web.Application:
    """The application; `registry` and `clock` are injectable for tests."""
    registry = registry if registry is not None else CollectorRegistry()

    def every_pool(app: web.Application, api: PrometheusAPI) -> Source:
        return Source(partial(read_snapshot, api.samples, shards=settings.query_shards),
                      partial(rollups_written_at, api.samples))

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
    # The pools are encoded once per snapshot and spliced in: at 1,000 pools the
    # envelope is the only part that changes between requests.
    head = encode_json({"schema_version": SCHEMA_VERSION,
                        "generated_at": served.snapshot.generated_at,
                        "stale": served.stale, "age_s": round(served.age_s, 3)})
    body = b"".join((head[:-1], b',"pools":', served.snapshot.encoded_pools(), b"}"))
    return web.Response(body=body, content_type="application/json")


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
    return web.Response(body=encode_json(summary), content_type="application/json",
                        headers=freshness_headers(served))


async def pool_resource_sources(request: web.Request) -> web.Response:
    served = await snapshot_or_error(request)
    if isinstance(served, web.Response):
        return served
    doc = describe_sources(served.snapshot)
    doc.update(stale=served.stale, age_s=round(served.age_s, 3))
    return web.Response(body=encode_json(doc), content_type="application/json")
