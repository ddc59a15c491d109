"""The status view as one terminal screen: bars sized to the terminal, colour on a TTY.

An unknown value is a hatched bar (diagonals; "///" in ASCII) and a "?" figure, so
nothing unknown looks like the empty track ("---" in ASCII) of a measured 0. Label
values (proxy_id, gpu_model) come from scrape targets: control characters in them are
replaced, so a hostile label cannot move the cursor or recolour the screen.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from poolscope.scheduler_bridge.status.model import (
    LEGEND,
    UNKNOWN,
    FleetView,
    GpuModelView,
    PoolView,
    count,
    fill,
    gibibytes,
    level,
    percent,
    state,
    timestamp,
)

_COLOURS = {"ok": "32", "warn": "33", "high": "31", "unknown": "2", "head": "1"}
_QUALITY_LEVEL = {"complete": "ok", "partial": "warn", "missing": "high"}
_EIGHTHS = " ▏▎▍▌▋▊▉"
HATCH = "\u2571"  # a diagonal: unknown, drawn unlike any fill level
MIN_BAR, MAX_BAR = 5, 30
MAX_ID = 32
FIGURE = 4  # "100%" and "?" right-aligned after a bar
SEP = "  "
POOL_HEADERS = ("POOL", "LOAD", "SATURATION", "ALIVE", "STALE", "MISS", "IDLE", "IDLE?",
                "QUALITY", "ADMISSION")
GPU_HEADERS = ("POOL", "GPU UTIL", "GPU MEMORY", "MODEL", "HEALTHY", "UNHEALTHY", "MEMORY")
NO_GPU_DATA = "no GPU data"

# A cell: its plain text and a colour key (None: default), padded before it is painted.
Cell = tuple[str, str | None]


@dataclass(frozen=True)
class Style:
    width: int  # terminal columns
    colour: bool  # ANSI colours: only for a TTY
    unicode: bool  # block characters and "…", when the output encoding has them

    def bar_width(self, others: int) -> int:
        """Two gauges share the columns the rest of the table leaves them."""
        return max(MIN_BAR, min(MAX_BAR, (self.width - others) // 2 - FIGURE - 1))


def render_text(view: FleetView, style: Style) -> str:
    head = (f"poolscope status: {len(view.pools)} pools at {timestamp(view.generated_at)},"
            f" age {view.age()}")
    lines = [_paint(head, "head", style)]
    if view.stale:
        lines.append(_paint("STALE: the bridge cannot reach Prometheus; these numbers are "
                            f"{view.age(0)} old", "high", style))
    if not view.pools:
        lines.append("no pools: no proxy_pool: series in Prometheus")
        return "\n".join(lines)
    id_w = min(MAX_ID, max(len(p.proxy_id) for p in view.pools))
    lines += ["", *_table(POOL_HEADERS, lambda bar_w: [_pool_row(p, id_w, bar_w, style)
                                                       for p in view.pools], style)]
    lines += ["", *_gpu_section(view, id_w, style), "", *textwrap.wrap(
        f"MISS: {LEGEND['missing']}; IDLE?: {LEGEND['idle_unknown']}; "
        f"{bar(None, 3, unicode=style.unicode)} {UNKNOWN}: {LEGEND['unknown']}; "
        f"{NO_GPU_DATA}: {LEGEND['no_gpu_data']}", style.width)]
    return "\n".join(lines)


def _pool_row(p: PoolView, id_w: int, bar_w: int, style: Style) -> list[Cell]:
    quality = _QUALITY_LEVEL.get(p.data_quality, "unknown")
    return [(_clip(p.proxy_id, id_w, style), None),
            _gauge(p.load_ratio, bar_w, style), _gauge(p.saturation, bar_w, style),
            *((count(n), None if n is not None else "unknown")
              for n in (p.alive, p.stale, p.missing, p.idle, p.idle_unknown)),
            (p.data_quality, quality), (state(p.admission_state), None)]


def _gpu_section(view: FleetView, id_w: int, style: Style) -> list[str]:
    if all(p.gpus is None for p in view.pools):
        return [f"GPUs: no pool has GPU data ({LEGEND['no_gpu_data']})"]
    model_w = min(MAX_ID, max(len(g.model) for g in view.gpu_models))
    blank: list[Cell] = [("", None)] * 2

    def rows(bar_w: int) -> list[list[Cell]]:
        out: list[list[Cell]] = []
        for p in view.pools:
            pool: Cell = (_clip(p.proxy_id, id_w, style), None)
            gauges = [_gauge(p.gpu_util_ratio, bar_w, style),
                      _gauge(p.gpu_memory_used_ratio, bar_w, style)]
            if p.gpus is None:
                out.append([pool, *gauges, (NO_GPU_DATA, "unknown"), *[("", None)] * 3])
            out += [[pool if i == 0 else ("", None), *(gauges if i == 0 else blank),
                     *_capacity(g, model_w, style)] for i, g in enumerate(p.gpus or ())]
        return out + [[("FLEET" if i == 0 else "", "head"), *blank,
                       *_capacity(g, model_w, style)] for i, g in enumerate(view.gpu_models)]

    return [_paint(f"GPUs: {LEGEND['gpus']}", "head", style),
            *_table(GPU_HEADERS, rows, style)]


def _capacity(g: GpuModelView, model_w: int, style: Style) -> list[Cell]:
    return [(_clip(g.model, model_w, style), None), (count(g.healthy), None),
            (count(g.unhealthy), "high" if g.unhealthy else None),
            (gibibytes(g.memory_total_bytes), None)]


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


def _table(headers: Sequence[str], make_rows: Callable[[int], Sequence[Sequence[Cell]]],
           style: Style) -> list[str]:
    """Left-aligned text, right-aligned figures; padding first, so colour cannot skew it.

    Columns 1 and 2 are gauges: rows are made once with the narrowest bars to measure
    the other columns, then again with bars sharing whatever width is left.
    """
    widths = _widths(headers, make_rows(MIN_BAR))
    others = sum(widths) - widths[1] - widths[2] + len(SEP) * (len(headers) - 1)
    rows = make_rows(style.bar_width(others))
    widths = _widths(headers, rows)
    numeric = [all(_is_figure(r[i][0]) for r in rows) for i in range(len(headers))]

    def line(cells: Sequence[Cell]) -> str:
        out = []
        for (text, colour), w, right in zip(cells, widths, numeric, strict=True):
            padded = text.rjust(w) if right else text.ljust(w)
            out.append(_paint(padded, colour, style))
        return SEP.join(out).rstrip()

    head = [(h, "head") for h in headers]
    return [line(head), *(line(r) for r in rows)]


def _widths(headers: Sequence[str], rows: Sequence[Sequence[Cell]]) -> list[int]:
    return [max(len(h), *(len(r[i][0]) for r in rows)) for i, h in enumerate(headers)]


def _is_figure(text: str) -> bool:
    """Counts and sizes: right-aligned (a bar cell starts with a bar character)."""
    return text in ("", UNKNOWN) or text[0].isdigit()


def _clip(text: str, width: int, style: Style) -> str:
    text = "".join(c if c.isprintable() else "\ufffd" for c in text)
    ellipsis = "…" if style.unicode else "~"
    return text if len(text) <= width else text[: width - len(ellipsis)] + ellipsis


def _paint(text: str, colour: str | None, style: Style) -> str:
    if not style.colour or colour is None or not text:
        return text
    return f"\x1b[{_COLOURS[colour]}m{text}\x1b[0m"
