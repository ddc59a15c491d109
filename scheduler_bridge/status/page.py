"""`GET /status`: the status view as a small HTML page on the Scheduler bridge.

Self-contained (inline CSS, no script, no external asset) so that it works where the
bridge is reachable and nothing else is, and refreshes itself with a meta tag. It is
drawn from the snapshot the JSON routes serve, through the same provider, so opening
it costs no Prometheus query of its own and cannot disagree with the JSON.

Every label value (proxy_id, gpu_model) comes from a scrape target and is escaped;
the Content-Security-Policy forbids scripts besides, should an escape ever be missed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from html import escape

from aiohttp import web

from poolscope.bridge.cache import Served, Unavailable
from poolscope.scheduler_bridge.client import BridgeSnapshot, parse_pool
from poolscope.scheduler_bridge.status.model import (
    LEGEND,
    UNKNOWN,
    FleetView,
    GpuModelView,
    PoolView,
    build_view,
    count,
    fill,
    gibibytes,
    level,
    percent,
    state,
    timestamp,
)

SnapshotProvider = Callable[[], Awaitable[Served]]
REFRESH_S = 5
HEADERS = {"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'",
           "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1em;color:#222;background:#fff}
h1{font-size:1.2em;margin:0 0 .5em}h2{font-size:1em;margin:1.2em 0 .3em}
table{border-collapse:collapse}th,td{padding:.2em .6em;text-align:left;white-space:nowrap}
th{border-bottom:1px solid #999;font-weight:600}td.n{text-align:right}
.stale{background:#fdd;color:#900;padding:.3em .6em;font-weight:600}
.bar{display:inline-block;width:8em;height:.9em;background:#e6e6e6;vertical-align:middle;
border:1px solid #bbb}.bar>span{display:block;height:100%}
.bar.unknown{background:repeating-linear-gradient(45deg,#fff 0 4px,#ccc 4px 8px)}
.ok>span{background:#3a3}.warn>span{background:#d90}.high>span{background:#c22}
.pct{display:inline-block;width:3.5em;text-align:right}.unknown-text{color:#888}
.q-complete{color:#282}.q-partial{color:#a60}.q-missing{color:#c22}.bad{color:#c22}
.legend{color:#555;font-size:.9em}.fleet{font-weight:600}
"""


def add_status_routes(app: web.Application, snapshot: SnapshotProvider, *,
                      refresh_s: int = REFRESH_S) -> None:
    """Serve GET /status from `snapshot`, the provider the JSON routes read."""

    async def status_page(request: web.Request) -> web.Response:
        try:
            served = await snapshot()
        except Unavailable as e:
            return _page(503, refresh_s, "no snapshot",
                         f"<p class=stale>No snapshot recent enough to show: "
                         f"{escape(str(e))}</p>")
        view = build_view(bridge_snapshot(served))
        return _page(200, refresh_s, f"{len(view.pools)} pools", render_body(view))

    app.router.add_get("/status", status_page)


def bridge_snapshot(served: Served) -> BridgeSnapshot:
    """The cached summaries as the client reads them, so the view has one input type."""
    snap = served.snapshot
    return BridgeSnapshot(generated_at=snap.generated_at, stale=served.stale,
                          age_s=served.age_s,
                          pools={pid: parse_pool(doc) for pid, doc in snap.pools.items()})


def _page(status: int, refresh_s: int, title: str, body: str) -> web.Response:
    html = (f"<!doctype html><html lang=en><head><meta charset=utf-8>"
            f"<meta http-equiv=refresh content={int(refresh_s)}>"
            f"<meta name=viewport content='width=device-width'>"
            f"<title>poolscope status: {escape(title)}</title><style>{_CSS}</style></head>"
            f"<body>{body}</body></html>")
    return web.Response(status=status, text=html, content_type="text/html",
                        charset="utf-8", headers=HEADERS)


def render_body(view: FleetView) -> str:
    parts = [f"<h1>poolscope status: {len(view.pools)} pools at "
             f"{timestamp(view.generated_at)}, age {view.age()}</h1>"]
    if view.stale:
        parts.append(f"<p class=stale>STALE: the bridge cannot reach Prometheus; these "
                     f"numbers are {view.age(0)} old</p>")
    parts.append(_table(
        ("Pool", "Load", "Saturation", "Alive", "Stale", "Missing", "Idle", "Idle unknown",
         "Data quality", "Admission"), (_pool_row(p) for p in view.pools), "pools"))
    if any(p.gpus is not None for p in view.pools):
        rows = [row for p in view.pools for row in _gpu_rows(p)]
        rows += [_gpu_cells("", "Fleet" if i == 0 else "", "", "", g)
                 for i, g in enumerate(view.gpu_models)]
        parts += [f"<h2>GPUs: {escape(LEGEND['gpus'])}</h2>", _table(
            ("Pool", "GPU util", "GPU memory", "Model", "Healthy", "Unhealthy", "Memory"),
            rows, "gpus")]
    else:
        parts.append(f"<h2>GPUs</h2><p class=unknown-text>No pool has GPU data "
                     f"({escape(LEGEND['no_gpu_data'])}).</p>")
    parts.append("<p class=legend>" + "<br>".join(
        f"<b>{escape(name)}</b>: {escape(LEGEND[key])}" for name, key in (
            ("Missing", "missing"), ("Idle", "idle"), ("Idle unknown", "idle_unknown"),
            ("no GPU data", "no_gpu_data"))) + "</p>")
    return "".join(parts)


def _pool_row(p: PoolView) -> str:
    figures = "".join(_figure(count(n)) for n in
                      (p.alive, p.stale, p.missing, p.idle, p.idle_unknown))
    quality = escape(p.data_quality)
    return (f"<tr data-pool='{escape(p.proxy_id)}'><td>{escape(p.proxy_id)}</td>"
            f"<td>{gauge(p.load_ratio)}</td><td>{gauge(p.saturation)}</td>{figures}"
            f"<td class='q-{quality}'>{quality}</td>"
            f"<td>{escape(state(p.admission_state))}</td></tr>")


def _gpu_rows(p: PoolView) -> list[str]:
    util, memory = gauge(p.gpu_util_ratio), gauge(p.gpu_memory_used_ratio)
    if p.gpus is None:
        return [f"<tr data-pool='{escape(p.proxy_id)}'><td>{escape(p.proxy_id)}</td>"
                f"<td>{util}</td><td>{memory}</td>"
                f"<td class=unknown-text colspan=4>no GPU data</td></tr>"]
    return [_gpu_cells(p.proxy_id, p.proxy_id if i == 0 else "", util if i == 0 else "",
                       memory if i == 0 else "", g) for i, g in enumerate(p.gpus)]


def _gpu_cells(pool_id: str, shown: str, util: str, memory: str, g: GpuModelView) -> str:
    """One model's row; `pool_id` empty for the fleet totals, `shown` once per pool."""
    unhealthy = " bad" if g.unhealthy else ""
    pool = f" data-pool='{escape(pool_id)}'" if pool_id else " class=fleet"
    return (f"<tr{pool} data-model='{escape(g.model)}'><td>{escape(shown)}</td><td>{util}</td>"
            f"<td>{memory}</td><td>{escape(g.model)}</td>{_figure(count(g.healthy))}"
            f"{_figure(count(g.unhealthy), unhealthy)}"
            f"{_figure(gibibytes(g.memory_total_bytes))}</tr>")


def gauge(ratio: float | None) -> str:
    """A bar and its figure; unknown is a hatched bar and "?", never an empty bar."""
    filled = fill(ratio)
    if filled is None:
        return (f"<span class='bar unknown' title=unknown></span>"
                f"<span class='pct unknown-text'>{UNKNOWN}</span>")
    return (f"<span class='bar {level(ratio)}' role=meter aria-valuenow='{filled:.3f}' "
            f"aria-valuemin=0 aria-valuemax=1><span style='width:{filled * 100:.1f}%'>"
            f"</span></span><span class=pct>{percent(ratio)}</span>")


def _figure(text: str, extra: str = "") -> str:
    unknown = " unknown-text" if text == UNKNOWN else ""
    return f"<td class='n{unknown}{extra}'>{escape(text)}</td>"


def _table(headers: Iterable[str], rows: Iterable[str], name: str) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    return f"<table id={name}><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
