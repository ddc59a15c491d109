"""The Proxy bridge's HTTP face: one pool, in detail, and why each of its fields is
what it is.

The compact summary is built by the code both bridges share (`poolscope.bridge`:
`read_snapshot`, the same rollup selectors narrowed to this pool, and
`encode_json`), so both bridges serve the same bytes for this pool. The Proxy-local
series are read in the same refresh, at the same evaluation time, so the detail, the
summary and the null reasons describe one instant. Middlewares, caching, stale serving
and the shared routes are the shared skeleton's (`bridge_app`); each body is rendered
once per snapshot and served with its ETag, gzip and 304 (`bridge/http_cache.py`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from poolscope.bridge.app import Settings, bridge_app, snapshot_or_error
from poolscope.bridge.cache import Served, Source
from poolscope.bridge.http_cache import answer, rendered
from poolscope.bridge.local_queries import LocalQueries, read_local
from poolscope.bridge.local_view import LocalView
from poolscope.bridge.promapi import PrometheusAPI
from poolscope.bridge.promql import scoped, validate_proxy_id
from poolscope.bridge.queries import read_snapshot, rollups_written_at
from poolscope.bridge.sources import describe_sources
from poolscope.bridge.summary import PoolSnapshot, Sample, encode_json
from poolscope.proxy_bridge.diagnosis import null_reasons
from poolscope.proxy_bridge.heartbeat import heartbeat_payload
from poolscope.proxy_bridge.metrics import ProxyBridgeMetrics
from poolscope.service.middleware import json_error

log = logging.getLogger(__name__)

DETAIL_LOCAL = "local"


@dataclass(frozen=True)
class LocalOutcome:
    """The local view read with the snapshot of `evaluated_at`, or why it failed."""

    evaluated_at: float
    view: LocalView | None
    error: str | None = None


class PoolReader:
    """One refresh: this pool's rollups and raw series, at one evaluation time."""

    def __init__(self, proxy_id: str, api: PrometheusAPI, shards: int,
                 metrics: ProxyBridgeMetrics) -> None:
        self.proxy_id = validate_proxy_id(proxy_id)
        self._api = api
        self._shards = shards
        self._metrics = metrics
        self._local_queries = LocalQueries.for_pool(self.proxy_id)
        self.local: LocalOutcome | None = None

    async def _pool_rollups(self, selector: str, at: float) -> Sequence[Sample]:
        return await self._api.samples(scoped(selector, self.proxy_id), at)

    async def written_at(self, at: float) -> float | None:
        """The cache's probe: when the rules last wrote this pool's rollups."""
        return await rollups_written_at(self._pool_rollups, at)

    async def __call__(self, at: float) -> PoolSnapshot:
        snapshot, samples = await asyncio.gather(
            read_snapshot(self._pool_rollups, at, self._shards),
            read_local(self._api.samples, self._local_queries, at), return_exceptions=True)
        if isinstance(snapshot, BaseException):
            raise snapshot  # the cache serves the last good snapshot, or says why not
        if isinstance(samples, Exception):  # the summary stands; the detail says why not
            log.warning("local view at %s failed: %s", at, samples)
            self._metrics.local_views.labels("error").inc()
            self.local = LocalOutcome(at, None, str(samples))
            snapshot.failed_queries += 1  # so that the cache reads again at the next TTL
        elif isinstance(samples, BaseException):
            raise samples
        else:
            self._metrics.local_views.labels("ok").inc()
            self.local = LocalOutcome(at, LocalView.of(self.proxy_id, samples))
        return snapshot

    def local_for(self, snapshot: PoolSnapshot) -> LocalOutcome:
        """The local view read with this snapshot (set in the same refresh)."""
        local = self.local
        if local is None or local.evaluated_at != snapshot.generated_at:
            return LocalOutcome(snapshot.generated_at, None, "no local view for this snapshot")
        return local


READER = web.AppKey("reader", PoolReader)


def create_app(proxy_id: str, settings: Settings, *,
               registry: CollectorRegistry | None = None,
               clock: Callable[[], float] = time.time) -> web.Application:
    """The application; `registry` and `clock` are injectable for tests."""
    validate_proxy_id(proxy_id)
    registry = registry if registry is not None else CollectorRegistry()
    metrics = ProxyBridgeMetrics(registry)

    def this_pool(app: web.Application, api: PrometheusAPI) -> Source:
        reader = app[READER] = PoolReader(proxy_id, api, settings.query_shards, metrics)
        return Source(reader, reader.written_at)

    app = bridge_app(settings, metrics, registry, this_pool, clock=clock)
    app.router.add_get("/debug/pool_resource", pool_resource)
    app.router.add_get("/debug/pool_resource_sources", pool_resource_sources)
    app.router.add_get("/v1/pool_resource/heartbeat_payload", heartbeat)
    return app


# --- routes -------------------------------------------------------------------

async def pool_resource(request: web.Request) -> web.Response:
    detail = request.query.get("detail")
    if detail is not None and detail != DETAIL_LOCAL:
        return json_error(400, f"unknown detail: expected detail={DETAIL_LOCAL} or none",
                          detail=detail)
    served = await snapshot_or_error(request)
    if isinstance(served, web.Response):
        return served
    if detail == DETAIL_LOCAL:
        return await _local(request, served)
    return await _summary_response(request, served, "summary", lambda summary: summary)


async def heartbeat(request: web.Request) -> web.Response:
    served = await snapshot_or_error(request)
    if isinstance(served, web.Response):
        return served
    return await _summary_response(request, served, "heartbeat", heartbeat_payload)


async def pool_resource_sources(request: web.Request) -> web.Response:
    served = await snapshot_or_error(request)
    if isinstance(served, web.Response):
        return served
    reader = request.app[READER]

    def render() -> bytes:
        local = reader.local_for(served.snapshot)
        doc = describe_sources(served.snapshot)
        summary = served.snapshot.pools.get(reader.proxy_id)
        readings = served.snapshot.readings.get(reader.proxy_id, {})
        for entry in doc["fields"]:
            path = entry["path"]
            reading = readings.get(path)
            value = _at(summary, path)
            entry.update(wired=reading is not None and reading.present,
                         measured=value is not None, value=value)
            reasons = ([] if value is not None or local.view is None
                       else [r.as_dict() for r in null_reasons(local.view, path)])
            entry.update(null_reason="; ".join(r["detail"] for r in reasons) or None,
                         null_reasons=reasons)
        doc.update(proxy_id=reader.proxy_id, pool_known=summary is not None,
                   diagnosis_error=local.error, stale=served.stale)
        return encode_json(doc)

    return await answer(request, served, rendered(served, "sources", render))


async def _summary_response(request: web.Request, served: Served, key: str,
                            shape: Callable[[dict[str, Any]], dict[str, Any]]) -> web.Response:
    proxy_id = request.app[READER].proxy_id
    summary = served.snapshot.pools.get(proxy_id)
    if summary is None:
        return json_error(404, "no proxy_pool: series carries this proxy_id; "
                          "/debug/pool_resource_sources says why", proxy_id=proxy_id)
    return await answer(request, served,
                        rendered(served, key, lambda: encode_json(shape(summary))))


async def _local(request: web.Request, served: Served) -> web.Response:
    local = request.app[READER].local_for(served.snapshot)
    if local.view is None:
        return json_error(503, "the Proxy-local series could not be read with this snapshot",
                          cause=local.error, generated_at=served.snapshot.generated_at)
    view = local.view

    def render() -> bytes:
        doc = view.document()
        doc.update(stale=served.stale)
        return encode_json(doc)

    return await answer(request, served, rendered(served, DETAIL_LOCAL, render))


def _at(summary: dict[str, Any] | None, path: str) -> Any:
    """The summary's value at "section.key"; None when the pool has no summary."""
    if summary is None:
        return None
    section, key = path.split(".", 1)
    return summary.get(section, {}).get(key)
