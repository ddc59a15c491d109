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
from itertools import groupby
from typing import Literal, NamedTuple

from markupsafe import Markup

from poolscope.scheduler_bridge.status.model import TrendView, clock_time, percent
from poolscope.scheduler_bridge.status.templating import ENV

MAX_SCALE = 2.0
# Charts kept drawn: every pool's of a large fleet, for the step their trends last.
CACHED_CHARTS = 4096
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


class Mark(NamedTuple):
    """A run of one series' slots as drawn: a gap (no point: hatched from `x`, `width`
    wide), a dot (a point alone, at `x`, `y`) or a line through `points`."""

    kind: Literal["gap", "dot", "line"]
    series: str
    colour: str
    x: float = 0.0
    y: float = 0.0
    width: float = 0.0
    points: str = ""  # as SVG lists them, formatted here: a page draws thousands


_TEMPLATE = ENV.get_template("trend.svg")


@lru_cache(maxsize=CACHED_CHARTS)
def trend_svg(trend: TrendView, size: Size) -> Markup:
    """Both series of `trend` in one chart of `size`, placed here and drawn by
    trend.svg. Kept for the trends' step: a page refreshed within it draws none of its
    charts again (bench.status_page)."""
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

    marks: list[Mark] = []
    for name, label, colour in SERIES:
        points = [(xs[i], y(v)) if _finite(v) else None
                  for i, v in enumerate(getattr(trend, name))]
        first = 0
        for unknown, group in groupby(points, key=lambda point: point is None):
            run = list(group)
            a, b, first = first, first + len(run) - 1, first + len(run)
            if unknown:  # within the plot: the first and last slots' halves fall outside
                x0, x1 = max(xs[a] - half, left), min(xs[b] + half, left + w)
                marks.append(Mark("gap", label, colour, x=x0, width=x1 - x0))
            elif a == b:
                ((cx, cy),) = run
                marks.append(Mark("dot", label, colour, x=cx, y=cy))
            else:
                marks.append(Mark("line", label, colour, points=" ".join(
                    f"{px:.1f},{py:.1f}" for px, py in run)))
    labels: list[tuple[float, float, str, str]] = []  # x, y, text, anchor
    if size.axes:
        if scale > 1.0:
            labels.append((left - 4, y(scale) + 10, percent(scale), "end"))
        labels += [(left - 4, y(1.0) + 10, percent(1.0), "end"), (left - 4, h, "0%", "end"),
                   (left, size.height - 3, f"-{trend.minutes} min", "start"),
                   (left + w, size.height - 3, clock_time(trend.end), "end")]
    return Markup(_TEMPLATE.render(size=size, left=left, w=w, h=h, limit_y=y(1.0),
                                   marks=marks, labels=labels, words=describe(trend)))


def describe(trend: TrendView) -> str:
    """The chart in words, for its title and for a screen reader: the newest values."""
    newest = ", ".join(f"{label} {percent(_last(getattr(trend, name)))}"
                       for name, label, _ in SERIES)
    return f"last {trend.minutes} min; at {clock_time(trend.end)}: {newest}"


def _last(values: Sequence[float | None]) -> float | None:
    return values[-1] if values else None


def _finite(v: float | None) -> bool:
    return v is not None and math.isfinite(v)
