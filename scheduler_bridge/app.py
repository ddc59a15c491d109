"""The HTTP face of the bridge: every pool's summary, one pool's, and their provenance.

It stores and exposes; nothing here interprets a value. Errors are JSON with a cause
so that a Scheduler can log why it has no data, and every route is timed on /metrics.
"""

from __future__ import annotations

import hmac
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from scheduler_bridge.cache import Served, SnapshotCache, Unavailable
from scheduler_bridge.metrics import BridgeMetrics
from scheduler_bridge.promapi import PrometheusAPI
from scheduler_bridge.queries import read_snapshot
from scheduler_bridge.sources import describe_sources
from scheduler_bridge.summary import SCHEMA_VERSION, PoolSnapshot, encode_json

# Seed 000's ids look like "hp_127.0.0.1:8001". The id is only ever a dict key, never
# part of a query, but anything else is rejected before it reaches a log or a lookup.
PROXY_ID = re.compile(r"[A-Za-z0-9_.:\-]{1,128}")
UNAUTHENTICATED = frozenset({"/healthz"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Settings:
    backends: tuple[str, ...]
    cache_ttl_s: float = 1.0
    stale_after_s: float = 30.0
    query_timeout_s: float = 5.0
    auth_token: str | None = None
    query_shards: int = 1


CACHE = web.AppKey("cache", SnapshotCache)
METRICS = web.AppKey("metrics", BridgeMetrics)
REGISTRY = web.AppKey("registry", CollectorRegistry)


def create_app(settings: Settings, *, registry: CollectorRegistry | None = None,
               clock: Callable[[], float] = time.time) -> web.Application:
    """The application; `registry` and `clock` are injectable for tests."""
    registry = registry if registry is not None else CollectorRegistry()
    metrics = BridgeMetrics(registry)
    app = web.Application(middlewares=[
        _timing(metrics), _json_errors, _bearer_auth(settings.auth_token)])
    app[METRICS] = metrics
    app[REGISTRY] = registry

    async def backend_session(app: web.Application) -> AsyncIterator[None]:
        # identity: on the loopback / LAN hop to Prometheus, gzip costs more CPU on
        # both ends than it saves in transfer time.
        async with aiohttp.ClientSession(headers={"Accept-Encoding": "identity"}) as session:
            api = PrometheusAPI(settings.backends, session, settings.query_timeout_s,
                                observer=metrics)

            async def refresh(at: float) -> PoolSnapshot:
                return await read_snapshot(api.samples, at, settings.query_shards)

            app[CACHE] = SnapshotCache(refresh, ttl_s=settings.cache_ttl_s,
                                       stale_after_s=settings.stale_after_s,
                                       metrics=metrics, clock=clock)
            yield

    app.cleanup_ctx.append(backend_session)
    app.router.add_get("/debug/proxy_pool_resources", all_pools)
    # [^/]+ rather than the default [^{}/]+: braces reach the check and get a 400.
    app.router.add_get("/v1/pool_resources/{proxy_id:[^/]+}", one_pool)
    app.router.add_get("/debug/pool_resource_sources", pool_resource_sources)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_page)
    return app


# --- routes -------------------------------------------------------------------

async def all_pools(request: web.Request) -> web.Response:
    served = await _serve(request)
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
    if not PROXY_ID.fullmatch(proxy_id):
        return json_error(400, "invalid proxy_id: expected 1-128 of [A-Za-z0-9_.:-]")
    served = await _serve(request)
    if isinstance(served, web.Response):
        return served
    summary = served.snapshot.pools.get(proxy_id)
    if summary is None:
        return json_error(404, "unknown proxy_id: no proxy_pool: series carries it",
                          proxy_id=proxy_id)
    return web.Response(body=encode_json(summary), content_type="application/json",
                        headers=_freshness_headers(served))


async def pool_resource_sources(request: web.Request) -> web.Response:
    served = await _serve(request)
    if isinstance(served, web.Response):
        return served
    doc = describe_sources(served.snapshot)
    doc.update(stale=served.stale, age_s=round(served.age_s, 3))
    return web.Response(body=encode_json(doc), content_type="application/json")


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """Ready only while a backend answers: a stale snapshot is not readiness."""
    served = await _serve(request)
    if isinstance(served, web.Response):
        return served
    if served.stale:
        return json_error(503, "no backend answers; serving a stale snapshot",
                          age_s=round(served.age_s, 3))
    return web.json_response({"status": "ready", "pools": len(served.snapshot.pools)})


async def metrics_page(request: web.Request) -> web.Response:
    resp = web.Response(body=generate_latest(request.app[REGISTRY]))
    resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
    return resp


async def _serve(request: web.Request) -> Served | web.Response:
    try:
        return await request.app[CACHE].get()
    except Unavailable as e:
        return json_error(503, "no snapshot younger than --stale-after: every backend failed",
                          backends=[err.as_dict() for err in e.errors],
                          last_good_age_s=e.last_good_age_s)


def _freshness_headers(served: Served) -> dict[str, str]:
    return {"Age": str(int(served.age_s)),
            "X-Poolscope-Stale": "true" if served.stale else "false",
            "X-Poolscope-Generated-At": f"{served.snapshot.generated_at:.3f}"}


def json_error(status: int, message: str, **extra: Any) -> web.Response:
    return web.Response(status=status, body=encode_json({"error": message, **extra}),
                        content_type="application/json")


# --- middlewares --------------------------------------------------------------

def _timing(metrics: BridgeMetrics) -> Middleware:
    @web.middleware
    async def timing(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as e:
            status = e.status
            raise
        finally:
            # The route template, never the raw path: a client cannot mint label values.
            route = request.match_info.route.resource
            name = route.canonical if route is not None else "unmatched"
            metrics.request_seconds.labels(name, str(status)).observe(
                time.perf_counter() - started)
    return timing


@web.middleware
async def _json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """aiohttp's own 404/405 become JSON like every other error of this API."""
    try:
        return await handler(request)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        return json_error(e.status, e.reason)


def _bearer_auth(token: str | None) -> Middleware:
    expected = f"Bearer {token}".encode() if token else None

    @web.middleware
    async def bearer_auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        if expected is None or request.path in UNAUTHENTICATED:
            return await handler(request)
        given = request.headers.get("Authorization", "").encode()
        if not hmac.compare_digest(given, expected):
            response = json_error(401, "missing or wrong bearer token")
            response.headers["WWW-Authenticate"] = 'Bearer realm="poolscope"'
            return response
        return await handler(request)
    return bearer_auth
