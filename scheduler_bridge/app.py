"""The HTTP face of the bridge: every pool's summary, one pool's, and their provenance.

It stores and exposes; nothing here interprets a value. Errors are JSON with a cause
so that a Scheduler can log why it has no data, and every route is timed on /metrics.
The Proxy bridge is built on the same skeleton (`bridge_app`) and shared routes.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import aiohttp
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from exporters.common.identity import ID_RULE, valid_id
from exporters.common.thresholds import FRESH_S
from exporters.common.web import guarded, json_error, timing
from scheduler_bridge.cache import Refresh, Served, SnapshotCache, Unavailable
from scheduler_bridge.metrics import BridgeMetrics
from scheduler_bridge.promapi import MAX_ANSWER_BYTES, MAX_CLOCK_SKEW_S, PrometheusAPI
from scheduler_bridge.queries import read_snapshot
from scheduler_bridge.sources import describe_sources
from scheduler_bridge.status_page import add_status_routes
from scheduler_bridge.summary import SCHEMA_VERSION, PoolSnapshot, encode_json

NAMESPACE = "poolscope_scheduler_bridge"


@dataclass(frozen=True)
class Settings:
    backends: tuple[str, ...]
    cache_ttl_s: float = 1.0
    stale_after_s: float = 30.0
    query_timeout_s: float = 5.0
    auth_token: str | None = None
    query_shards: int = 1
    # Rollups older than this are served marked stale: three evaluations of 5 s.
    fresh_for_s: float = FRESH_S
    # How long a request waits for a refresh in flight before it gets the last snapshot.
    answer_within_s: float = 1.0
    max_answer_bytes: int = MAX_ANSWER_BYTES
    max_clock_skew_s: float = MAX_CLOCK_SKEW_S


CACHE = web.AppKey("cache", SnapshotCache)
METRICS = web.AppKey("metrics", BridgeMetrics)
REGISTRY = web.AppKey("registry", CollectorRegistry)

RefreshFor = Callable[[web.Application, PrometheusAPI], Refresh]


def create_app(settings: Settings, *, registry: CollectorRegistry | None = None,
               clock: Callable[[], float] = time.time) -> web.Application:
    """The application; `registry` and `clock` are injectable for tests."""
    registry = registry if registry is not None else CollectorRegistry()

    def every_pool(app: web.Application, api: PrometheusAPI) -> Refresh:
        async def refresh(at: float) -> PoolSnapshot:
            return await read_snapshot(api.samples, at, settings.query_shards)
        return refresh

    app = bridge_app(settings, BridgeMetrics(registry, namespace=NAMESPACE), registry,
                     every_pool, clock=clock)
    app.router.add_get("/debug/proxy_pool_resources", all_pools)
    # [^/]+ rather than the default [^{}/]+: braces reach the check and get a 400.
    app.router.add_get("/v1/pool_resources/{proxy_id:[^/]+}", one_pool)
    app.router.add_get("/debug/pool_resource_sources", pool_resource_sources)
    add_status_routes(app, lambda: app[CACHE].get())
    return app


def bridge_app(settings: Settings, metrics: BridgeMetrics, registry: CollectorRegistry,
               refresh_for: RefreshFor, *, clock: Callable[[], float]) -> web.Application:
    """What both bridges are before their own routes: the common middlewares, timed
    in `metrics`; one backend session for the app's life; a snapshot cache filled by
    `refresh_for(app, api)`; /healthz, /readyz and /metrics."""
    app = web.Application(middlewares=[
        timing(metrics.request_seconds), *guarded(settings.auth_token)])
    app[METRICS] = metrics
    app[REGISTRY] = registry

    async def backend_session(app: web.Application) -> AsyncIterator[None]:
        # identity: on the loopback / LAN hop to Prometheus, gzip costs more CPU on
        # both ends than it saves in transfer time.
        async with aiohttp.ClientSession(headers={"Accept-Encoding": "identity"}) as session:
            api = PrometheusAPI(settings.backends, session, settings.query_timeout_s,
                                observer=metrics, max_answer_bytes=settings.max_answer_bytes,
                                max_clock_skew_s=settings.max_clock_skew_s, clock=clock)
            app[CACHE] = SnapshotCache(refresh_for(app, api), ttl_s=settings.cache_ttl_s,
                                       stale_after_s=settings.stale_after_s,
                                       fresh_for_s=settings.fresh_for_s,
                                       answer_within_s=settings.answer_within_s,
                                       metrics=metrics, clock=clock)
            yield

    app.cleanup_ctx.append(backend_session)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_page)
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


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """Ready only while a backend answers: a stale snapshot is not readiness."""
    served = await snapshot_or_error(request)
    if isinstance(served, web.Response):
        return served
    if served.stale:
        return json_error(503, "serving a stale snapshot: no backend answers in time, or "
                          "the rollups are older than --fresh-for", age_s=round(served.age_s, 3))
    return web.json_response({"status": "ready", "pools": len(served.snapshot.pools)})


async def metrics_page(request: web.Request) -> web.Response:
    resp = web.Response(body=generate_latest(request.app[REGISTRY]))
    resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
    return resp


async def snapshot_or_error(request: web.Request) -> Served | web.Response:
    """The snapshot to answer from, or the 503 that names every backend's failure."""
    try:
        return await request.app[CACHE].get()
    except Unavailable as e:
        return json_error(503, e.reason, backends=[err.as_dict() for err in e.errors],
                          last_good_age_s=e.last_good_age_s)


def freshness_headers(served: Served) -> dict[str, str]:
    """How old a one-pool answer is, outside the body whose shape the schema fixes."""
    return {"Age": str(int(served.age_s)),
            "X-Poolscope-Stale": "true" if served.stale else "false",
            "X-Poolscope-Generated-At": f"{served.snapshot.generated_at:.3f}"}

