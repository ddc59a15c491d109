"""The status views as terminal screens: the fleet, and one pool drilled into; bars
sized to the terminal, colour on a TTY.

An unknown value is a hatched bar (diagonals; "///" in ASCII) and a "?" figure, so
nothing unknown looks like the empty track ("---" in ASCII) of a measured 0; a trend's
slot without a point is hatched too, while a measured 0 is the lowest block. Label
values (proxy_id, instance_id, gpu_model) come from scrape targets: control characters
in them are replaced, so a hostile label cannot move the cursor or recolour the screen.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from poolscope.scheduler_bridge.status.model import (
    LEGEND,
    NO_TREND,
    UNKNOWN,
    FleetView,
    GpuModelView,
    PoolView,
    clock_time,
    count,
    fill,
    gibibytes,
    level,
    percent,
    seconds,
    stale_banner,
    state,
    timestamp,
)
from poolscope.scheduler_bridge.status.pool_view import (
    FRESH,
    GpuView,
    InstanceView,
    PoolDetailView,
    gpus_text,
    load_text,
    resource_text,
)

_COLOURS = {"ok": "32", "warn": "33", "high": "31", "unknown": "2", "head": "1"}
_QUALITY_LEVEL = {"complete": "ok", "partial": "warn", "missing": "high"}
_LIVENESS_LEVEL = {"alive": "ok", "stale": "high", "unregistered": "warn"}
_EIGHTHS = " ▏▎▍▌▋▊▉"
_SPARKS, _ASCII_SPARKS = "▁▂▃▄▅▆▇█", "_.-=+*#"  # a measured 0 is the lowest mark
HATCH = "\u2571"  # a diagonal: unknown, drawn unlike any fill level
MIN_BAR, MAX_BAR = 5, 30
MAX_ID = 32
FIGURE = 4  # "100%" and "?" right-aligned after a bar
SEP = "  "
POOL_HEADERS = ("POOL", "LOAD", "SATURATION", "ALIVE", "STALE", "ASLEEP", "MISS", "IDLE", "IDLE?",
                "QUALITY", "ADMISSION")
GPU_HEADERS = ("POOL", "GPU UTIL", "GPU MEMORY", "MODEL", "HEALTHY", "UNHEALTHY", "USED", "FREE",
               "MEMORY")
CAPACITY_HEADERS = ("MODEL", "USED / FREE / UNHEALTHY", "TOTAL", "USED", "FREE", "UNHEALTHY",
                    "MEMORY")
INSTANCE_HEADERS = ("INSTANCE", "STATE", "RESOURCE", "ADMISSION", "LOAD", "IN / CAP", "IDLE",
                    "KV", "CPU", "MEM", "GPUS", "FAILING")
INSTANCE_GPU_HEADERS = ("INSTANCE", "GPU", "MODEL", "HEALTH", "UTIL", "MEMORY")
NO_GPU_DATA = "no GPU data"
TREND_LABEL_W = len("saturation")

# A cell: its plain text and a colour key (None: default), padded before it is painted.
Cell = tuple[str, str | None]


@dataclass(frozen=True)
class Style:
    width: int  # terminal columns
    colour: bool  # ANSI colours: only for a TTY
    unicode: bool  # block characters and "…", when the output encoding has them

    def bar_width(self, others: int, gauges: int = 2) -> int:
        """The gauges share the columns the rest of the table leaves them."""
        return max(MIN_BAR, min(MAX_BAR, (self.width - others) // gauges - FIGURE - 1))


def render_text(view: FleetView, style: Style) -> str:
    head = (f"poolscope status: {len(view.pools)} pools at {timestamp(view.generated_at)},"
            f" age {view.age()}")
    lines = [paint(head, "head", style)]
    lines += banner(view.stale, view.age_s, style)
    if not view.pools:
        lines.append("no pools: no proxy_pool: series in Prometheus")
        return "\n".join(lines)
    id_w = min(MAX_ID, max(len(p.proxy_id) for p in view.pools))
    lines += ["", *table(POOL_HEADERS, lambda bar_w: [_pool_row(p, id_w, bar_w, style)
                                                       for p in view.pools], style)]
    lines += ["", *_gpu_section(view, id_w, style), "", *textwrap.wrap(
        f"ASLEEP: {LEGEND['asleep']}; MISS: {LEGEND['missing']}; "
        f"IDLE?: {LEGEND['idle_unknown']}; "
        f"{bar(None, 3, unicode=style.unicode)} {UNKNOWN}: {LEGEND['unknown']}; "
        f"{NO_GPU_DATA}: {LEGEND['no_gpu_data']}", style.width)]
    return "\n".join(lines)


def _pool_row(p: PoolView, id_w: int, bar_w: int, style: Style) -> list[Cell]:
    quality = _QUALITY_LEVEL.get(p.data_quality, "unknown")
    return [(clip(p.proxy_id, id_w, style), None),
            _gauge(p.load_ratio, bar_w, style), _gauge(p.saturation, bar_w, style),
            *((count(n), None if n is not None else "unknown")
              for n in (p.alive, p.stale, p.asleep, p.missing, p.idle, p.idle_unknown)),
            (p.data_quality, quality), (state(p.admission_state), None)]


def _gpu_section(view: FleetView, id_w: int, style: Style) -> list[str]:
    if all(p.gpus is None for p in view.pools):
        return [f"GPUs: no pool has GPU data ({LEGEND['no_gpu_data']})"]
    model_w = min(MAX_ID, max(len(g.model) for g in view.gpu_models))
    blank: list[Cell] = [("", None)] * 2

    def rows(bar_w: int) -> list[list[Cell]]:
        out: list[list[Cell]] = []
        for p in view.pools:
            pool: Cell = (clip(p.proxy_id, id_w, style), None)
            gauges = [_gauge(p.gpu_util_ratio, bar_w, style),
                      _gauge(p.gpu_memory_used_ratio, bar_w, style)]
            if p.gpus is None:
                out.append([pool, *gauges, (NO_GPU_DATA, "unknown"), *[("", None)] * 5])
            out += [[pool if i == 0 else ("", None), *(gauges if i == 0 else blank),
                     *_model_health(g, model_w, style)] for i, g in enumerate(p.gpus or ())]
        return out

    def capacity(bar_w: int) -> list[list[Cell]]:
        return [[(clip(g.model, model_w, style), None),
                 (capacity_bar(g, bar_w, style.unicode), "head"), (count(g.total), None),
                 (count(g.used), None), (count(g.free), None),
                 (count(g.unhealthy), "high" if g.unhealthy else None),
                 (gibibytes(g.memory_total_bytes), None)] for g in view.gpu_models]

    used, free, sick = _CAPACITY_MARKS[style.unicode]
    return [paint("GPU CAPACITY PER MODEL (fleet)", "head", style),
            *table(CAPACITY_HEADERS, capacity, style, gauges=(1,)),
            *textwrap.wrap(f"{used} used, {free} free, {sick} unhealthy: {LEGEND['gpus']}",
                           style.width),
            "", paint("GPUs PER POOL", "head", style), *table(GPU_HEADERS, rows, style)]


_CAPACITY_MARKS = {True: ("█", "░", "\u2573"), False: ("#", "-", "x")}


def capacity_bar(g: GpuModelView, width: int, unicode: bool) -> str:
    """`width` characters split into used, free and unhealthy GPUs of the total; the
    healthy part hatched when its use is unknown, the whole bar when the total is."""
    hatch = HATCH if unicode else "/"
    shares = g.shares()
    if shares is None:
        return hatch * width
    used_c, free_c, sick_c = _CAPACITY_MARKS[unicode]
    used_share, _, sick_share = shares
    sick = round(sick_share * width)
    if used_share is None:
        return hatch * (width - sick) + sick_c * sick
    used = min(round(used_share * width), width - sick)
    return used_c * used + free_c * (width - used - sick) + sick_c * sick


def _model_health(g: GpuModelView, model_w: int, style: Style) -> list[Cell]:
    return [(clip(g.model, model_w, style), None), (count(g.healthy), None),
            (count(g.unhealthy), "high" if g.unhealthy else None), (count(g.used), None),
            (count(g.free), None), (gibibytes(g.memory_total_bytes), None)]


# --- one pool -----------------------------------------------------------------

def render_pool_text(view: PoolDetailView, style: Style) -> str:
    lines = [paint(f"poolscope status: pool {clip(view.proxy_id, MAX_ID, style)} at "
                    f"{timestamp(view.generated_at)}, age {view.age()}", "head", style)]
    lines += banner(view.stale, view.age_s, style)
    id_w = min(MAX_ID, len(view.proxy_id))
    lines += ["", *table(POOL_HEADERS, lambda bar_w: [_pool_row(view.pool, id_w, bar_w, style)],
                          style)]
    lines += ["", *_trend_lines(view, style), "", *_instance_section(view, style)]
    if view.queues:
        lines += ["", paint("QUEUES", "head", style) + "  " + "   ".join(
            paint(f"{q.name} {count(q.depth)} / {count(q.capacity)}, oldest "
                   f"{seconds(q.oldest_age_s)}", None, style) for q in view.queues)]
    lines += ["", *textwrap.wrap(
        f"STATE: {LEGEND['liveness']}; RESOURCE: {LEGEND['resource']}; "
        f"LOAD: {LEGEND['instance_load']}; {bar(None, 3, unicode=style.unicode)} {UNKNOWN}: "
        f"{LEGEND['unknown']}", style.width)]
    return "\n".join(lines)


def _trend_lines(view: PoolDetailView, style: Style) -> list[str]:
    head = paint("LAST 15 MIN", "head", style)
    if view.trend is None:
        return [head, paint(f"no trend: {view.trend_error or NO_TREND}", "unknown", style)]
    width = max(10, min(len(view.trend.load_ratio), style.width - TREND_LABEL_W - FIGURE - 4))
    out = [head]
    for label, values in (("load", view.trend.load_ratio),
                          ("saturation", view.trend.saturation)):
        last = values[-1] if values else None
        marks = paint(sparkline(values, width, style.unicode), level(last), style)
        out.append(f"{label:<{TREND_LABEL_W}}  {marks}  {percent(last):>{FIGURE}}")
    span, newest = f"-{view.trend.minutes} min", clock_time(view.trend.end)
    out.append(" " * (TREND_LABEL_W + 2) + span + newest.rjust(width - len(span)))
    return out


def sparkline(values: Sequence[float | None], width: int, unicode: bool = True) -> str:
    """`width` marks over `values`, each the highest known value of its slots (a busy
    moment is not averaged away), scaled 0..100%; a mark with no known slot is hatched."""
    marks = _SPARKS if unicode else _ASCII_SPARKS
    n = len(values)
    out = []
    for col in range(width):
        chunk = [v for v in values[col * n // width:max((col + 1) * n // width,
                                                        col * n // width + 1)]
                 if fill(v) is not None]
        if not chunk:
            out.append(HATCH if unicode else "/")
            continue
        filled = fill(max(chunk))
        assert filled is not None
        out.append(marks[min(len(marks) - 1, int(filled * (len(marks) - 1) + 0.5))])
    return "".join(out)


def _instance_section(view: PoolDetailView, style: Style) -> list[str]:
    head = paint("INSTANCES", "head", style)
    if view.instances is None:
        return [head, paint(f"the pool's series could not be read: "
                             f"{view.instances_error or UNKNOWN}", "high", style)]
    if not view.instances:
        return [head, "no series of the pool names an Instance"]
    instances = view.instances
    id_w = min(MAX_ID, max(len(i.instance_id) for i in instances))
    rows = table(INSTANCE_HEADERS, lambda bar_w: [_instance_row(i, id_w, bar_w, style)
                                                   for i in instances], style, gauges=(4,))
    gpus = [(i, g) for i in instances for g in i.gpus or ()]
    if not gpus:
        return [head, *rows, "", f"GPUs: no Instance has GPU data ({LEGEND['no_gpu_data']})"]
    model_w = min(MAX_ID, max(len(g.model) for _, g in gpus))
    return [head, *rows, "", paint("GPUs PER INSTANCE", "head", style),
            *table(INSTANCE_GPU_HEADERS, lambda bar_w: [
                _instance_gpu_row(i, g, id_w, model_w, bar_w, style) for i, g in gpus],
                style, gauges=(4, 5))]


def _instance_row(i: InstanceView, id_w: int, bar_w: int, style: Style) -> list[Cell]:
    resource = resource_text(i)
    gpus = gpus_text(i.gpu_models) or NO_GPU_DATA
    return [(clip(i.instance_id, id_w, style), None),
            (state(i.liveness), _LIVENESS_LEVEL.get(i.liveness or "", "unknown")),
            (resource, "ok" if i.resource == FRESH else "high"),
            (state(i.admission_state), None), _gauge(i.load_ratio, bar_w, style),
            (load_text(i), None), (seconds(i.idle_s), None if i.idle_s is not None else "unknown"),
            *((percent(r), level(r)) for r in (i.kv_cache_ratio, i.cpu_ratio,
                                               i.memory_used_ratio)),
            (clip(gpus, 2 * MAX_ID, style), None if i.gpu_models else "unknown"),
            ("; ".join(i.failing), "high" if i.failing else None)]


def _instance_gpu_row(i: InstanceView, g: GpuView, id_w: int, model_w: int, bar_w: int,
                      style: Style) -> list[Cell]:
    cells: list[Cell] = [(clip(i.instance_id, id_w, style), None), (g.gpu, None),
                         (clip(g.model, model_w, style), None)]
    if g.healthy is False:  # no usage: an unhealthy GPU is neither used nor free
        return [*cells, ("unhealthy", "high"), ("not counted", "unknown"), ("", None)]
    return [*cells, ("healthy" if g.healthy else UNKNOWN, None),
            _gauge(g.util_ratio, bar_w, style), _gauge(g.memory_used_ratio, bar_w, style)]


def _gauge(ratio: float | None, width: int, style: Style) -> Cell:
    """A bar and its figure in one cell of one colour: "?" for both when unknown."""
    return (f"{bar(ratio, width, unicode=style.unicode)} {percent(ratio):>{FIGURE}}",
            level(ratio))


def bar(ratio: float | None, width: int, *, unicode: bool = True) -> str:
    """`width` characters: filled to the ratio (eighths with unicode), or hatched."""
    filled = fill(ratio)
    if filled is None:
        return (HATCH if unicode else "/") * width
    if not unicode:
        n = round(filled * width)
        return "#" * n + "-" * (width - n)
    full, part = divmod(round(filled * width * 8), 8)
    text = "█" * full + (_EIGHTHS[part] if part else "")
    return text + "░" * (width - len(text))


def table(headers: Sequence[str], make_rows: Callable[[int], Sequence[Sequence[Cell]]],
          style: Style, gauges: Sequence[int] = (1, 2), words: Sequence[int] = ()) -> list[str]:
    """Left-aligned text, right-aligned figures; padding first, so colour cannot skew it.

    The `gauges` columns hold bars: rows are made once with the narrowest bars to
    measure the other columns, then again with bars sharing whatever width is left
    (a table without gauges is made once). The `words` columns are text even where
    every cell starts with a figure ("4 NVIDIA L4").
    """
    rows = make_rows(MIN_BAR)
    if gauges:
        widths = _widths(headers, rows)
        others = (sum(w for i, w in enumerate(widths) if i not in gauges)
                  + len(SEP) * (len(headers) - 1))
        rows = make_rows(style.bar_width(others, len(gauges)))
    widths = _widths(headers, rows)
    numeric = [i not in words and all(_is_figure(r[i][0]) for r in rows)
               for i in range(len(headers))]

    def line(cells: Sequence[Cell]) -> str:
        out = []
        for (text, colour), w, right in zip(cells, widths, numeric, strict=True):
            padded = text.rjust(w) if right else text.ljust(w)
            out.append(paint(padded, colour, style))
        return SEP.join(out).rstrip()

    head = [(h, "head") for h in headers]
    return [line(head), *(line(r) for r in rows)]


def _widths(headers: Sequence[str], rows: Sequence[Sequence[Cell]]) -> list[int]:
    return [max(len(h), *(len(r[i][0]) for r in rows)) for i, h in enumerate(headers)]


def _is_figure(text: str) -> bool:
    """Counts and sizes: right-aligned (a bar cell starts with a bar character)."""
    return text in ("", UNKNOWN) or text[0].isdigit() or text.startswith("? /")


def clip(text: str, width: int, style: Style) -> str:
    text = _printable(text)
    ellipsis = "…" if style.unicode else "~"
    return text if len(text) <= width else text[: width - len(ellipsis)] + ellipsis


def banner(stale: bool, age_s: float | None, style: Style) -> list[str]:
    banner = stale_banner(stale, age_s)
    return [] if banner is None else [paint(banner, "high", style)]


def _printable(text: str) -> str:
    """Control characters replaced: nothing a label or a backend's error carries can
    move the cursor, clear the screen or recolour it."""
    return "".join(c if c.isprintable() else "\ufffd" for c in text)


def paint(text: str, colour: str | None, style: Style) -> str:
    """Every cell and line goes through here, so every one is made printable."""
    text = _printable(text)
    if not style.colour or colour is None or not text:
        return text
    return f"\x1b[{_COLOURS[colour]}m{text}\x1b[0m"
