"""`GET /debug/idle_instances`: what can I stop, as JSON, for people and their tools,
never for the Scheduler (the view itself: status/idle_view.py).

The pools' lines come from the served snapshot; the Instances from one instant query
over every pool, asked about the time the rules wrote that snapshot's rollups, so each
pool's rows and its idle counts are read from the same samples. The query is made when
a page or client asks (once per snapshot), never by the snapshot's refresh: the
Scheduler's route does not wait on it.
"""

from __future__ import annotations

from collections.abc import Sequence

from aiohttp import web

from poolscope.bridge.app import API, snapshot_or_error
from poolscope.bridge.cache import Served
from poolscope.bridge.local_queries import names_selector
from poolscope.bridge.promapi import AllBackendsFailed
from poolscope.bridge.summary import InstantQuery, Sample, encode_json
from poolscope.scheduler_bridge.pool_detail import rollups_time
from poolscope.scheduler_bridge.status.idle_view import (
    IDLE_FAMILIES,
    IdleView,
    build_idle_view,
    by_pool,
)
from poolscope.scheduler_bridge.status.model import FleetView, bridge_snapshot, build_view
from poolscope.service.middleware import json_error

ROUTE = "/debug/idle_instances"
IDLE_QUERY = names_selector([f.name for f in IDLE_FAMILIES])


class LastRead:
    """The Instances' samples as of the latest snapshot's rollups: one query per rule
    evaluation, however many pages and clients ask within it."""

    def __init__(self) -> None:
        self._at: float | None = None
        self._samples: Sequence[Sample] = ()

    async def samples(self, query: InstantQuery, at: float) -> Sequence[Sample]:
        if at != self._at:
            self._samples, self._at = await query(IDLE_QUERY, at), at
        return self._samples


LAST_READ = web.AppKey("idle_last_read", LastRead)


def add_idle_routes(app: web.Application) -> None:
    app[LAST_READ] = LastRead()
    app.router.add_get(ROUTE, idle_instances)


async def read_idle_view(app: web.Application, served: Served,
                         fleet: FleetView) -> tuple[IdleView | None, str | None]:
    """The view of `fleet` (built from `served`), or None and why the backends failed
    the Instances' read."""
    at = rollups_time(served)
    try:
        samples = await app[LAST_READ].samples(app[API].samples, at)
    except AllBackendsFailed as e:
        return None, str(e)
    return build_idle_view(fleet, by_pool(samples), at), None


async def idle_instances(request: web.Request) -> web.Response:
    served = await snapshot_or_error(request)
    if isinstance(served, web.Response):
        return served
    view, error = await read_idle_view(request.app, served, build_view(bridge_snapshot(served)))
    if view is None:
        return json_error(503, "the Instances could not be read", cause=error)
    return web.Response(body=encode_json(view.as_dict()), content_type="application/json")
