"""The drill-down behind the status page and `poolscope-status POOL`: one pool's
Instances and every pool's last 15 minutes, for people, never for the Scheduler.

`GET /debug/pool_detail/{proxy_id}` is the pool's summary from the served snapshot,
its Instances (the local view the Proxy bridge serves, read from the pool's own series
as of the rollups' evaluation) and its trend.
`GET /debug/pool_trends` is every pool's trend. Both ask Prometheus beyond the
snapshot, so a part that cannot be read is null beside its reason and the rest
stands: the summary is still worth showing when the Instances are not.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, TypeVar

from aiohttp import web

from poolscope.bridge.app import API, snapshot_or_error
from poolscope.bridge.cache import Served
from poolscope.bridge.local_queries import LocalQueries, read_local
from poolscope.bridge.local_view import LocalView
from poolscope.bridge.promapi import AllBackendsFailed
from poolscope.bridge.summary import SCHEMA_VERSION, encode_json
from poolscope.bridge.trends import TrendReader, Trends
from poolscope.service.identity import ID_RULE, valid_id
from poolscope.service.middleware import json_error

TRENDS = web.AppKey("trends", TrendReader)
_T = TypeVar("_T")


def add_detail_routes(app: web.Application) -> None:
    async def trend_reader(app: web.Application) -> AsyncIterator[None]:
        app[TRENDS] = reader = TrendReader(app[API])  # after the session made the API
        yield
        reader.close()

    app.cleanup_ctx.append(trend_reader)
    app.router.add_get("/debug/pool_detail/{proxy_id:[^/]+}", pool_detail)
    app.router.add_get("/debug/pool_trends", pool_trends)


class PoolRefused(Exception):
    """The path names no pool to drill into; `status` is the HTTP answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def checked_pool(request: web.Request, served: Served) -> str:
    """The path's proxy_id when the snapshot knows it; else raises PoolRefused."""
    proxy_id = request.match_info["proxy_id"]
    # It goes into PromQL here: refused outside the shared charset before anything else
    # (and escaped where it is used: poolscope.bridge.promql).
    if not valid_id(proxy_id):
        raise PoolRefused(400, f"invalid proxy_id: expected {ID_RULE}")
    if proxy_id not in served.snapshot.pools:
        raise PoolRefused(404, "unknown proxy_id: no proxy_pool: series carries it")
    return proxy_id


def rollups_time(served: Served) -> float:
    """When the rules wrote the snapshot's rollups (else when it was read): what a read
    of raw series asks about, so that its rows and the pools' counts share samples."""
    return served.snapshot.rollups_at or served.snapshot.generated_at


async def detail_document(app: web.Application, served: Served, proxy_id: str,
                          ) -> dict[str, Any]:
    """The pool's summary, Instances and trend, each read part or its failure. The
    Instances are read as of when the rules wrote the summary's rollups, so a row and
    the pool's counts come from the same samples."""
    at = rollups_time(served)
    local, trends = await asyncio.gather(
        read_local(app[API].samples, LocalQueries.for_pool(proxy_id), at),
        app[TRENDS].read(at, proxy_id), return_exceptions=True)
    samples, local_error = _part(local)
    trend, trends_error = _part(trends)
    return {
        "schema_version": SCHEMA_VERSION, "proxy_id": proxy_id, "generated_at": at,
        "stale": served.stale, "age_s": round(served.age_s, 3),
        "summary": served.snapshot.pools[proxy_id],
        "local": None if samples is None else LocalView.of(proxy_id, samples).document(),
        "local_error": local_error,
        "trends": None if trend is None else trend.as_dict(),
        "trends_error": trends_error,
    }


async def fleet_trends(app: web.Application, at: float) -> tuple[Trends | None, str | None]:
    """Every pool's trend ending at `at`, or None and why not."""
    try:
        return await app[TRENDS].read(at), None
    except AllBackendsFailed as e:
        return None, str(e)


def _part(result: _T | BaseException) -> tuple[_T | None, str | None]:
    """A gathered read, or None and why the backends failed it; any other failure is a
    bug, and raised."""
    if isinstance(result, AllBackendsFailed):
        return None, str(result)
    if isinstance(result, BaseException):
        raise result
    return result, None


# --- routes -------------------------------------------------------------------

async def pool_detail(request: web.Request) -> web.Response:
    served = await snapshot_or_error(request)
    if isinstance(served, web.Response):
        return served
    try:
        proxy_id = checked_pool(request, served)
    except PoolRefused as e:
        return json_error(e.status, str(e))
    doc = await detail_document(request.app, served, proxy_id)
    return web.Response(body=encode_json(doc), content_type="application/json")


async def pool_trends(request: web.Request) -> web.Response:
    served = await snapshot_or_error(request)
    if isinstance(served, web.Response):
        return served
    trends, error = await fleet_trends(request.app, served.snapshot.generated_at)
    if trends is None:
        return json_error(503, "the trends could not be read", cause=error)
    return web.Response(body=encode_json(trends.as_dict()), content_type="application/json")
