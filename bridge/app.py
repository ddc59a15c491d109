"""What both bridges are before their own routes: settings, one backend session, the
snapshot cache, the common middlewares and /healthz, /readyz and /metrics.

It stores and exposes; nothing here interprets a value. Errors are JSON with a cause
so that a Scheduler can log why it has no data, and every route is timed on /metrics.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry

from poolscope.bridge.cache import Served, SnapshotCache, Source, Unavailable
from poolscope.bridge.metrics import BridgeMetrics
from poolscope.bridge.promapi import MAX_ANSWER_BYTES, MAX_CLOCK_SKEW_S, PrometheusAPI
from poolscope.contract.thresholds import FRESH_S, SCRAPE_INTERVAL_S
from poolscope.exporters.common.exposition import ScrapePage, metrics_handler, process_collectors
from poolscope.service.middleware import json_error, timing
from poolscope.service.web import Exposure


@dataclass(frozen=True)
class Settings:
    backends: tuple[str, ...]
    # How often, at most, a backend is asked whether the rollups moved (0: every
    # request reads every pool).
    cache_ttl_s: float = 1.0
    # The rules' evaluation interval (deploy/prometheus): no new rollups before it ends.
    evaluation_interval_s: float = SCRAPE_INTERVAL_S
    stale_after_s: float = 30.0
    query_timeout_s: float = 5.0
    # Who may read the bridge, where its page is: the common flags' part of the app.
    exposure: Exposure = field(default_factory=Exposure)
    query_shards: int = 1
    # Rollups older than this are served marked stale: three evaluations.
    fresh_for_s: float = FRESH_S
    # How long a request waits for a refresh in flight before it gets the last snapshot.
    answer_within_s: float = 1.0
    max_answer_bytes: int = MAX_ANSWER_BYTES
    max_clock_skew_s: float = MAX_CLOCK_SKEW_S


CACHE = web.AppKey("cache", SnapshotCache)
# The backends, for routes that ask Prometheus more than the snapshot holds.
API = web.AppKey("api", PrometheusAPI)
METRICS = web.AppKey("metrics", BridgeMetrics)
REGISTRY = web.AppKey("registry", CollectorRegistry)

SourceFor = Callable[[web.Application, PrometheusAPI], Source]


def bridge_app(settings: Settings, metrics: BridgeMetrics, registry: CollectorRegistry,
               source_for: SourceFor, *, clock: Callable[[], float]) -> web.Application:
    """What both bridges are before their own routes: the common middlewares, timed
    in `metrics`; one backend session for the app's life; a snapshot cache reading
    `source_for(app, api)`; /healthz, /readyz and the metrics page:
    `registry`, then the process' own series (`process_*`, `poolscope_build_info`),
    which stay out of `registry` so that it holds only what the bridge counts."""
    app = web.Application(middlewares=[
        timing(metrics.request_seconds), *settings.exposure.middlewares()])
    app[METRICS] = metrics
    app[REGISTRY] = registry

    async def backend_session(app: web.Application) -> AsyncIterator[None]:
        # identity: on the loopback / LAN hop to Prometheus, gzip costs more CPU on
        # both ends than it saves in transfer time.
        async with aiohttp.ClientSession(headers={"Accept-Encoding": "identity"}) as session:
            api = PrometheusAPI(settings.backends, session, settings.query_timeout_s,
                                observer=metrics, max_answer_bytes=settings.max_answer_bytes,
                                max_clock_skew_s=settings.max_clock_skew_s, clock=clock)
            app[API] = api
            app[CACHE] = SnapshotCache(source_for(app, api), ttl_s=settings.cache_ttl_s,
                                       evaluation_interval_s=settings.evaluation_interval_s,
                                       stale_after_s=settings.stale_after_s,
                                       fresh_for_s=settings.fresh_for_s,
                                       answer_within_s=settings.answer_within_s,
                                       metrics=metrics, clock=clock)
            yield

    app.cleanup_ctx.append(backend_session)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get(settings.exposure.telemetry_path, metrics_handler(
        ScrapePage(registry, *process_collectors()).page))
    return app


# --- shared routes ------------------------------------------------------------

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


async def snapshot_or_error(request: web.Request) -> Served | web.Response:
    """The snapshot to answer from, or the 503 that names every backend's failure."""
    try:
        return await request.app[CACHE].get()
    except Unavailable as e:
        return json_error(503, e.reason, backends=[err.as_dict() for err in e.errors],
                          last_good_age_s=e.last_good_age_s)

