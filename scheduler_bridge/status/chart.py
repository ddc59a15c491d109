"""A pool's 15-minute trend as inline SVG, drawn on the server.

No script and no asset: the page works offline and under a CSP that forbids both. A
slot without a point breaks its line and is hatched, so a gap in the data can never be
read as a dip to 0; the scale reaches at least 100%, where a dashed line marks the
healthy limit, and grows to show an overload up to MAX_SCALE (drawn clipped above).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from html import escape
from itertools import groupby

from poolscope.scheduler_bridge.status.model import TrendView, clock_time, percent

MAX_SCALE = 2.0
# Charts kept drawn: every pool's of a large fleet, for the step their trends last.
CACHED_CHARTS = 4096
# The one hatch pattern every chart's gaps use, defined once per page (HATCH_DEFS).
HATCH_ID = "unknown-hatch"
HATCH_DEFS = (f"<svg width=0 height=0 style='position:absolute' aria-hidden=true><defs>"
              f"<pattern id={HATCH_ID} width=6 height=6 patternUnits=userSpaceOnUse "
              f"patternTransform='rotate(45)'><rect width=6 height=6 fill='#fff'/>"
              f"<line x1=0 y1=0 x2=0 y2=6 stroke='#bbb' stroke-width='3'/></pattern>"
              f"</defs></svg>")
SERIES = (("load_ratio", "load", "#2a6fdb"), ("saturation", "saturation", "#d9822b"))


@dataclass(frozen=True)
class Size:
    width: int
    height: int
    axes: bool  # labels for the scale and the window: the pool page's chart


SPARK = Size(120, 26, axes=False)
LARGE = Size(640, 160, axes=True)
_AXIS_W, _AXIS_H = 40, 16  # room for the scale's labels, and the window's
INSET = 2


@lru_cache(maxsize=CACHED_CHARTS)
def trend_svg(trend: TrendView, size: Size) -> str:
    """Both series of `trend` in one chart of `size`. Kept for the trends' step: a page
    refreshed within it draws none of its charts again (bench.status_page)."""
    left, bottom = (_AXIS_W, _AXIS_H) if size.axes else (0, 0)
    w, h = size.width - left, size.height - bottom
    known = [v for name, _, _ in SERIES for v in getattr(trend, name) if _finite(v)]
    scale = min(MAX_SCALE, max([1.0, *known]))
    n = len(trend.load_ratio)
    # Inset by a line's width, so the first and newest points are drawn whole.
    xs = ([left + INSET + (w - 2 * INSET) * i / (n - 1) for i in range(n)] if n > 1
          else [left + w / 2])
    half = (w - 2 * INSET) / (n - 1) / 2 if n > 1 else w / 2  # a gap covers its slots

    def y(v: float) -> float:
        return h - h * min(v, scale) / scale

    parts = [f"<rect x={left} y=0 width={w} height={h} fill='#fafafa' stroke='#ddd'/>",
             f"<line x1={left} x2={left + w} y1={y(1.0):.1f} y2={y(1.0):.1f} "
             f"stroke='#999' stroke-dasharray='3 3'/>"]
    for name, label, colour in SERIES:
        points = [f"{xs[i]:.1f},{y(v):.1f}" if _finite(v) else None
                  for i, v in enumerate(getattr(trend, name))]
        first = 0
        for unknown, group in groupby(points, key=lambda point: point is None):
            run = list(group)
            a, b, first = first, first + len(run) - 1, first + len(run)
            if unknown:  # within the plot: the first and last slots' halves fall outside
                x0, x1 = max(xs[a] - half, left), min(xs[b] + half, left + w)
                parts.append(f"<rect class=gap data-series={label} x={x0:.1f} y=0 "
                             f"width={x1 - x0:.1f} height={h} "
                             f"fill='url(#{HATCH_ID})' opacity='0.6'/>")
            elif a == b:
                cx, cy = str(run[0]).split(",")
                parts.append(f"<circle data-series={label} cx={cx} cy={cy} r=1.5 "
                             f"fill='{colour}'/>")
            else:
                parts.append(f"<polyline data-series={label} points='{' '.join(map(str, run))}'"
                             f" fill=none stroke='{colour}' stroke-width='1.5'/>")
    if size.axes:
        if scale > 1.0:
            parts.append(_text(left - 4, y(scale) + 10, percent(scale), "end"))
        parts += [_text(left - 4, y(1.0) + 10, percent(1.0), "end"),
                  _text(left - 4, h, "0%", "end"),
                  _text(left, size.height - 3, f"-{trend.minutes} min", "start"),
                  _text(left + w, size.height - 3, clock_time(trend.end), "end")]
    words = escape(describe(trend))
    return (f"<svg class=trend width={size.width} height={size.height} role=img "
            f"aria-label='{words}'><title>{words}</title>{''.join(parts)}</svg>")


def describe(trend: TrendView) -> str:
    """The chart in words, for its title and for a screen reader: the newest values."""
    newest = ", ".join(f"{label} {percent(_last(getattr(trend, name)))}"
                       for name, label, _ in SERIES)
    return f"last {trend.minutes} min; at {clock_time(trend.end)}: {newest}"


def _last(values: Sequence[float | None]) -> float | None:
    return values[-1] if values else None


def _finite(v: float | None) -> bool:
    return v is not None and math.isfinite(v)


def _text(x: float, y: float, text: str, anchor: str) -> str:
    return (f"<text x={x:.1f} y={y:.1f} font-size=10 fill='#555' "
            f"text-anchor={anchor}>{text}</text>")
