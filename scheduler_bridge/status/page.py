"""`GET /status` and `GET /status/pools/{proxy_id}`: the fleet and one pool drilled
into, as small HTML pages on the Scheduler bridge.

Self-contained (inline CSS and SVG, no script, no external asset) so that they work
where the bridge is reachable and nothing else is, and refresh themselves with a meta
tag. The fleet's numbers come from the snapshot the JSON routes serve, through the same
provider, so the page cannot disagree with the JSON; its trends and a pool's Instances
are what `/debug/pool_trends` and `/debug/pool_detail/{proxy_id}` serve.

Every label value (proxy_id, instance_id, gpu_model) comes from a scrape target and is
escaped; the Content-Security-Policy forbids scripts besides, should an escape ever be
missed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from html import escape
from urllib.parse import quote

from aiohttp import web

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
from poolscope.scheduler_bridge.status.chart import HATCH_DEFS, HATCH_ID, LARGE, SPARK, trend_svg
from poolscope.scheduler_bridge.status.html import figure, gauge, gpus_cell, legend, table
from poolscope.scheduler_bridge.status.idle_page import render_idle_section
from poolscope.scheduler_bridge.status.model import (
    LEGEND,
    NO_TREND,
    STALE_CAUSE,
    UNKNOWN,
    FleetView,
    GpuModelView,
    PoolView,
    TrendView,
    bridge_snapshot,
    build_view,
    count,
    gibibytes,
    level,
    seconds,
    state,
    timestamp,
)
from poolscope.scheduler_bridge.status.pool_view import (
    GpuView,
    InstanceView,
    PoolDetailView,
    build_pool_detail,
    load_text,
    resource_text,
)
from poolscope.service.identity import valid_id

SnapshotProvider = Callable[[], Awaitable[Served]]
REFRESH_S = 5
# Cache-Control is the snapshot's (bridge/http_cache.py): a page is one per snapshot.
PAGE_HEADERS = {"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'",
                "X-Content-Type-Options": "nosniff"}

_CSS = f"""
body{{font:14px/1.4 system-ui,sans-serif;margin:1em;color:#222;background:#fff}}
h1{{font-size:1.2em;margin:0 0 .5em}}h2{{font-size:1em;margin:1.2em 0 .3em}}
h3{{font-size:.9em;margin:.8em 0 .3em}}
table{{border-collapse:collapse}}th,td{{padding:.2em .6em;text-align:left;white-space:nowrap}}
th{{border-bottom:1px solid #999;font-weight:600}}td.n{{text-align:right}}
td{{vertical-align:middle}}a{{color:#1a4fa0}}
.stale{{background:#fdd;color:#900;padding:.3em .6em;font-weight:600}}
.bar{{display:inline-block;width:8em;height:.9em;background:#e6e6e6;vertical-align:middle;
border:1px solid #bbb}}.bar>span{{display:block;height:100%;float:left}}
.bar.unknown{{background:repeating-linear-gradient(45deg,#fff 0 4px,#ccc 4px 8px)}}
.ok>span{{background:#3a3}}.warn>span{{background:#d90}}.high>span{{background:#c22}}
.bar.gpus{{display:inline-flex}}.bar.gpus>span{{float:none}}
.bar>span.ok{{background:#3a3}}.bar>span.warn{{background:#d90}}.bar>span.high{{background:#c22}}
.bar>span.free{{background:#cfe8cf}}.bar>span.sick{{background:repeating-linear-gradient(
45deg,#c22 0 3px,#f4c4c4 3px 6px)}}.bar>span.used-unknown{{background:repeating-linear-gradient(
45deg,#fff 0 4px,#ccc 4px 8px)}}
.pct{{display:inline-block;width:3.5em;text-align:right}}.unknown-text{{color:#888}}
.q-complete{{color:#282}}.q-partial{{color:#a60}}.q-missing{{color:#c22}}.bad{{color:#c22}}
.legend{{color:#555;font-size:.9em}}.fleet{{font-weight:600}}
#instances .bar,#instance-gpus .bar{{width:4em}}
#instances td:last-child{{white-space:normal;max-width:16em}}
.key{{display:inline-block;width:1em;height:.25em;vertical-align:middle;margin:0 .3em}}
.trend-unknown{{display:inline-block;width:{SPARK.width}px;height:{SPARK.height}px;
background:repeating-linear-gradient(45deg,#fff 0 4px,#ccc 4px 8px);vertical-align:middle}}
"""


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
                         f"<p class=stale>No snapshot recent enough to show: "
                         f"{escape(str(e))}</p>")

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
            html = _html(refresh_s, f"{len(view.pools)} pools",
                         render_body(view, render_idle_section(idle, idle_error),
                                     rollups_time(served)))
            return html, error is None and idle_error is None

        body = await rendered_whole(served, "status", render, HTML)
        return await answer(request, served, body, PAGE_HEADERS)

    async def pool_page(request: web.Request) -> web.Response:
        served = await served_or_page()
        if isinstance(served, web.Response):
            return served
        try:
            proxy_id = checked_pool(request, served)
        except PoolRefused as e:
            return _page(e.status, refresh_s, "no such pool",
                         f"<p class=stale>{escape(str(e))}</p><p><a href='../../status'>"
                         f"All pools</a></p>")

        async def render() -> tuple[bytes, bool]:
            doc = await detail_document(request.app, served, proxy_id)
            html = _html(refresh_s, f"pool {proxy_id}",
                         render_pool_body(build_pool_detail(doc), rollups_time(served)))
            return html, doc["local_error"] is None and doc["trends_error"] is None

        body = await rendered_whole(served, ("pool", proxy_id), render, HTML)
        return await answer(request, served, body, PAGE_HEADERS)

    app.router.add_get("/status", status_page)
    app.router.add_get("/status/pools/{proxy_id:[^/]+}", pool_page)


def _html(refresh_s: int, title: str, body: str) -> bytes:
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8>"
            f"<meta http-equiv=refresh content={int(refresh_s)}>"
            f"<meta name=viewport content='width=device-width'>"
            f"<title>poolscope status: {escape(title)}</title><style>{_CSS}</style></head>"
            f"<body>{HATCH_DEFS}{body}</body></html>").encode()


def _page(status: int, refresh_s: int, title: str, body: str) -> web.Response:
    """A page that is no view of a snapshot (none to show, no such pool): never kept."""
    return web.Response(status=status, body=_html(refresh_s, title, body), headers={
        **PAGE_HEADERS, "Cache-Control": "no-store", "Content-Type": HTML})


# --- the fleet ------------------------------------------------------------------

POOL_HEADERS = ("Pool", "Load", "Saturation", "Alive", "Stale", "Asleep", "Missing", "Idle",
                "Idle unknown", "Data quality", "Admission")
CAPACITY_HEADERS = ("Model", "Used / free / unhealthy", "Total", "Used", "Free", "Unhealthy",
                    "Memory")


def render_body(view: FleetView, idle_section: str, written_at: float) -> str:
    """The fleet page: the pools, what can be stopped (`idle_section`), the GPUs, from
    rollups the rules wrote at `written_at`."""
    parts = [f"<h1>poolscope status: {len(view.pools)} pools at "
             f"{timestamp(view.generated_at)}</h1>", _stale_note(view.stale, written_at)]
    if view.trend_error is not None:
        parts.append(f"<p class=unknown-text>Trends unavailable: {escape(view.trend_error)}"
                     f"</p>")
    parts.append(table((*POOL_HEADERS, "Last 15 min"),
                        (_pool_row(p, link=True, trend=True) for p in view.pools), "pools"))
    parts += [_trend_key(), idle_section]
    if any(p.gpus is not None for p in view.pools):
        rows = [row for p in view.pools for row in _gpu_rows(p)]
        parts += ["<h2>GPUs per model, fleet</h2>", table(
            CAPACITY_HEADERS, (_capacity_row(g) for g in view.gpu_models), "fleet-gpus"),
            "<h2>GPUs per pool</h2>", table(
            ("Pool", "GPU util", "GPU memory", *CAPACITY_HEADERS), rows, "gpus")]
    else:
        parts.append(f"<h2>GPUs</h2><p class=unknown-text>No pool has GPU data "
                     f"({escape(LEGEND['no_gpu_data'])}).</p>")
    parts.append(legend(("Asleep", "asleep"), ("Missing", "missing"), ("Idle", "idle"),
                         ("Idle unknown", "idle_unknown"), ("no GPU data", "no_gpu_data"),
                         ("Used / free / unhealthy", "gpus"), ("Last 15 min", "trend")))
    return "".join(parts)


def _stale_note(stale: bool, written_at: float) -> str:
    """The stale warning, with when the rules wrote the numbers rather than their age:
    a page is rendered once per snapshot (the Age header says how old it is)."""
    if not stale:
        return ""
    return (f"<p class=stale>{escape(STALE_CAUSE)}; these numbers were written at "
            f"{timestamp(written_at)}</p>")


def _pool_row(p: PoolView, *, link: bool, trend: bool) -> str:
    figures = "".join(figure(count(n)) for n in
                      (p.alive, p.stale, p.asleep, p.missing, p.idle, p.idle_unknown))
    quality = escape(p.data_quality)
    name = escape(p.proxy_id)
    if link and valid_id(p.proxy_id):  # any other id is refused by the pool page
        name = f"<a href='status/pools/{quote(p.proxy_id, safe='')}'>{name}</a>"
    chart = f"<td>{_spark(p.trend)}</td>" if trend else ""
    return (f"<tr data-pool='{escape(p.proxy_id)}'><td>{name}</td>"
            f"<td>{gauge(p.load_ratio)}</td><td>{gauge(p.saturation)}</td>{figures}"
            f"<td class='q-{quality}'>{quality}</td>"
            f"<td>{escape(state(p.admission_state))}</td>{chart}</tr>")


def _spark(trend: TrendView | None) -> str:
    if trend is None:
        return f"<span class=trend-unknown title='no trend'></span>{UNKNOWN}"
    return trend_svg(trend, SPARK)


def _trend_key() -> str:
    return ("<p class=legend>Last 15 min: <span class=key style='background:#2a6fdb'></span>"
            "load <span class=key style='background:#d9822b'></span>saturation, dashed at "
            f"100%; <svg width=14 height=10><rect width=14 height=10 fill='url(#{HATCH_ID})'/>"
            "</svg> no data</p>")


def _gpu_rows(p: PoolView) -> list[str]:
    util, memory = gauge(p.gpu_util_ratio), gauge(p.gpu_memory_used_ratio)
    if p.gpus is None:
        return [f"<tr data-pool='{escape(p.proxy_id)}'><td>{escape(p.proxy_id)}</td>"
                f"<td>{util}</td><td>{memory}</td>"
                f"<td class=unknown-text colspan=7>no GPU data</td></tr>"]
    return [f"<tr data-pool='{escape(p.proxy_id)}' data-model='{escape(g.model)}'>"
            f"<td>{escape(p.proxy_id) if i == 0 else ''}</td><td>{util if i == 0 else ''}</td>"
            f"<td>{memory if i == 0 else ''}</td>{_capacity_cells(g)}</tr>"
            for i, g in enumerate(p.gpus)]


def _capacity_row(g: GpuModelView) -> str:
    return f"<tr class=fleet data-model='{escape(g.model)}'>{_capacity_cells(g)}</tr>"


def _capacity_cells(g: GpuModelView) -> str:
    unhealthy = " bad" if g.unhealthy else ""
    return (f"<td>{escape(g.model)}</td><td>{capacity_bar(g)}</td>{figure(count(g.total))}"
            f"{figure(count(g.used))}{figure(count(g.free))}"
            f"{figure(count(g.unhealthy), unhealthy)}{figure(gibibytes(g.memory_total_bytes))}")


def capacity_bar(g: GpuModelView) -> str:
    """Used, free and unhealthy GPUs as shares of the model's total; unknown parts
    hatched grey (used unknown) or the whole bar hatched (no total)."""
    shares = g.shares()
    if shares is None:
        return "<span class='bar unknown' title=unknown></span>"
    used, free, sick = shares
    if used is None or free is None:
        spans = [("used-unknown", 1.0 - sick, "used unknown")]
    else:
        busy = None if not g.healthy or g.used is None else g.used / g.healthy
        spans = [(level(busy), used, "used"), ("free", free, "free")]
    spans.append(("sick", sick, "unhealthy"))
    inner = "".join(f"<span class='{cls}' title='{title}' style='width:{share * 100:.1f}%'>"
                    f"</span>" for cls, share, title in spans if share > 0)
    return f"<span class='bar gpus'>{inner}</span>"


# --- one pool -------------------------------------------------------------------

INSTANCE_HEADERS = ("Instance", "State", "Resource data", "Admission", "Load / capacity",
                    "Idle for", "KV cache", "CPU", "Memory", "GPUs", "Failing now")
GPU_HEADERS = ("Instance", "GPU", "Model", "Health", "Utilization", "Memory")


def render_pool_body(view: PoolDetailView, written_at: float) -> str:
    """One pool's page, from rollups the rules wrote at `written_at` (as the fleet's)."""
    parts = [f"<p><a href='../../status'>All pools</a></p>"
             f"<h1>pool {escape(view.proxy_id)} at {timestamp(view.generated_at)}</h1>",
             _stale_note(view.stale, written_at)]
    parts += [table(POOL_HEADERS, [_pool_row(view.pool, link=False, trend=False)], "pool"),
              "<h2>GPUs per model</h2>",
              table(("Pool", "GPU util", "GPU memory", *CAPACITY_HEADERS),
                     _gpu_rows(view.pool), "gpus")]
    parts.append("<h2>Last 15 minutes</h2>")
    if view.trend is not None:
        parts += [trend_svg(view.trend, LARGE), _trend_key()]
    else:
        why = view.trend_error or NO_TREND
        parts.append(f"<p class=unknown-text>No trend: {escape(why)}</p>")
    parts.append("<h2>Instances</h2>")
    if view.instances is None:
        parts.append(f"<p class=stale>The pool's series could not be read: "
                     f"{escape(view.instances_error or 'unknown')}</p>")
    elif not view.instances:
        parts.append("<p class=unknown-text>No series of the pool names an Instance.</p>")
    else:
        parts.append(table(INSTANCE_HEADERS, map(_instance_row, view.instances), "instances"))
        gpus = [row for i in view.instances for row in _instance_gpu_rows(i)]
        parts.append("<h2>GPUs per Instance</h2>")
        parts.append(table(GPU_HEADERS, gpus, "instance-gpus") if gpus else
                     f"<p class=unknown-text>No Instance has GPU data "
                     f"({escape(LEGEND['no_gpu_data'])}).</p>")
    if view.queues:
        parts.append("<h2>Queues</h2>" + table(
            ("Queue", "Depth", "Capacity", "Oldest waiting"),
            (f"<tr data-queue='{escape(q.name)}'><td>{escape(q.name)}</td>"
             f"{figure(count(q.depth))}{figure(count(q.capacity))}"
             f"{figure(seconds(q.oldest_age_s))}</tr>" for q in view.queues), "queues"))
    parts.append(legend(("State", "liveness"), ("Resource data", "resource"),
                         ("Load / capacity", "instance_load"), ("Used / free / unhealthy", "gpus"),
                         ("no GPU data", "no_gpu_data")))
    return "".join(parts)


def _instance_row(i: InstanceView) -> str:
    live = escape(state(i.liveness))
    live_cls = {"alive": "q-complete", "stale": "q-missing", "unregistered": "q-partial"}.get(
        i.liveness or "", "unknown-text")
    resource = escape(resource_text(i))
    load = (f"{gauge(i.load_ratio)} <span class=unknown-text>{load_text(i)}</span>")
    failing = ("<span class=bad>" + escape("; ".join(i.failing)) + "</span>") if i.failing \
        else ""
    return (f"<tr data-instance='{escape(i.instance_id)}'><td>{escape(i.instance_id)}</td>"
            f"<td class='{live_cls}'>{live}</td>"
            f"<td class='{'q-complete' if i.resource == 'fresh' else 'q-missing'}'>"
            f"{resource}</td><td>{escape(state(i.admission_state))}</td><td>{load}</td>"
            f"{figure(seconds(i.idle_s))}"
            f"<td>{gauge(i.kv_cache_ratio)}</td><td>{gauge(i.cpu_ratio)}</td>"
            f"<td>{gauge(i.memory_used_ratio)}</td><td>{gpus_cell(i.gpu_models)}</td><td>{failing}</td></tr>")


def _instance_gpu_rows(i: InstanceView) -> list[str]:
    return [f"<tr data-instance='{escape(i.instance_id)}' data-gpu='{escape(g.gpu)}'>"
            f"<td>{escape(i.instance_id)}</td><td>{escape(g.gpu)}</td>"
            f"<td>{escape(g.model)}</td>{_gpu_health(g)}</tr>" for g in i.gpus or ()]


def _gpu_health(g: GpuView) -> str:
    if g.healthy is False:
        return ("<td class=bad>unhealthy</td><td class=unknown-text colspan=2>"
                "not counted: neither used nor free</td>")
    return (f"<td>{'healthy' if g.healthy else UNKNOWN}</td><td>{gauge(g.util_ratio)}</td>"
            f"<td>{gauge(g.memory_used_ratio)}</td>")
