"""`GET /status` and `GET /status/pools/{proxy_id}`: the fleet and one pool drilled
into, as small HTML pages on the Scheduler bridge.

Self-contained (inline CSS and SVG, no script, no external asset) so that they work
where the bridge is reachable and nothing else is, and refresh themselves with a meta
tag. The fleet's numbers come from the snapshot the JSON routes serve, through the same
provider, so the page cannot disagree with the JSON; its trends and a pool's Instances
are what `/debug/pool_trends` and `/debug/pool_detail/{proxy_id}` serve.

Drawn by templates/ from the view models; the label values there come from scrape
targets, and the templates are autoescaped (templating.py). The Content-Security-Policy
forbids scripts besides, should markup ever get through.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp import web
from markupsafe import Markup

from poolscope.bridge.cache import Served, Unavailable
from poolscope.bridge.http_cache import HTML, answer, rendered_whole
from poolscope.scheduler_bridge.idle_instances import add_idle_routes, read_idle_view
from poolscope.scheduler_bridge.pool_detail import (
    PoolRefused,
    add_detail_routes,
    checked_pool,
    detail_document,
    fleet_trends,
    rollups_time,
)
from poolscope.scheduler_bridge.status.chart import LARGE, SPARK, trend_svg
from poolscope.scheduler_bridge.status.idle_view import IdleView
from poolscope.scheduler_bridge.status.model import FleetView, bridge_snapshot, build_view
from poolscope.scheduler_bridge.status.pool_view import PoolDetailView, build_pool_detail
from poolscope.scheduler_bridge.status.templating import ENV

SnapshotProvider = Callable[[], Awaitable[Served]]
REFRESH_S = 5
# Cache-Control is the snapshot's (bridge/http_cache.py): a page is one per snapshot.
PAGE_HEADERS = {"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'",
                "X-Content-Type-Options": "nosniff"}
# The pages draw each chart through trend_svg, which keeps it for the trends' step.
ENV.globals.update(trend_svg=trend_svg, SPARK=SPARK, LARGE=LARGE)
_FLEET, _POOL, _IDLE, _MESSAGE = map(ENV.get_template, (
    "fleet.html", "pool.html", "idle.html", "message.html"))


def add_status_routes(app: web.Application, snapshot: SnapshotProvider, *,
                      refresh_s: int = REFRESH_S) -> None:
    """Serve the status pages from `snapshot`, the provider the JSON routes read, and
    the drill-down and idle routes whose documents (and trend reader) the pages draw."""
    add_detail_routes(app)
    add_idle_routes(app)

    async def served_or_page() -> Served | web.Response:
        try:
            return await snapshot()
        except Unavailable as e:
            return _page(503, refresh_s, "no snapshot",
                         f"No snapshot recent enough to show: {e}")

    async def status_page(request: web.Request) -> web.Response:
        served = await served_or_page()
        if isinstance(served, web.Response):
            return served

        async def render() -> tuple[bytes, bool]:
            snapshot = bridge_snapshot(served)
            (trends, error), (idle, idle_error) = await asyncio.gather(
                fleet_trends(request.app, served.snapshot.generated_at),
                read_idle_view(request.app, served, build_view(snapshot)))
            view = build_view(snapshot, trends, error)
            html = render_body(view, render_idle_section(idle, idle_error),
                               rollups_time(served), refresh_s)
            return html.encode(), error is None and idle_error is None

        body = await rendered_whole(served, "status", render, HTML)
        return await answer(request, served, body, PAGE_HEADERS)

    async def pool_page(request: web.Request) -> web.Response:
        served = await served_or_page()
        if isinstance(served, web.Response):
            return served
        try:
            proxy_id = checked_pool(request, served)
        except PoolRefused as e:
            return _page(e.status, refresh_s, "no such pool", str(e), back=True)

        async def render() -> tuple[bytes, bool]:
            doc = await detail_document(request.app, served, proxy_id)
            html = render_pool_body(build_pool_detail(doc), rollups_time(served), refresh_s)
            return html.encode(), doc["local_error"] is None and doc["trends_error"] is None

        body = await rendered_whole(served, ("pool", proxy_id), render, HTML)
        return await answer(request, served, body, PAGE_HEADERS)

    app.router.add_get("/status", status_page)
    app.router.add_get("/status/pools/{proxy_id:[^/]+}", pool_page)


def _page(status: int, refresh_s: int, title: str, message: str, *,
          back: bool = False) -> web.Response:
    """A page that is no view of a snapshot (none to show, no such pool): never kept."""
    html = _MESSAGE.render(refresh_s=refresh_s, title=title, message=message, back=back)
    return web.Response(status=status, body=html.encode(), headers={
        **PAGE_HEADERS, "Cache-Control": "no-store", "Content-Type": HTML})


def render_body(view: FleetView, idle_section: Markup, written_at: float,
                refresh_s: int = REFRESH_S) -> str:
    """The fleet page: the pools, what can be stopped (`idle_section`, the markup
    render_idle_section drew), the GPUs, from rollups the rules wrote at `written_at`."""
    return _FLEET.render(view=view, idle_section=idle_section,
                         written_at=written_at, refresh_s=refresh_s)


def render_idle_section(view: IdleView | None, error: str | None) -> Markup:
    """The fleet page's "What can I stop": `view` None is `error` shown, never an empty
    list (which would say that nothing can be stopped)."""
    return Markup(_IDLE.render(view=view, error=error))


def render_pool_body(view: PoolDetailView, written_at: float,
                     refresh_s: int = REFRESH_S) -> str:
    """One pool's page, from rollups the rules wrote at `written_at` (as the fleet's)."""
    return _POOL.render(view=view, written_at=written_at, refresh_s=refresh_s)
