"""The pieces every status page is drawn with: tables, figures, gauges, the legend.

One home, so that a "?" or a hatched bar means the same on every page. Every text
goes through `escape`: label values come from scrape targets.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape

from poolscope.scheduler_bridge.status.model import LEGEND, UNKNOWN, fill, level, percent
from poolscope.scheduler_bridge.status.pool_view import InstanceGpus


def gauge(ratio: float | None) -> str:
    """A bar and its figure; unknown is a hatched bar and "?", never an empty bar."""
    filled = fill(ratio)
    if filled is None:
        return (f"<span class='bar unknown' title=unknown></span>"
                f"<span class='pct unknown-text'>{UNKNOWN}</span>")
    return (f"<span class='bar {level(ratio)}' role=meter aria-valuenow='{filled:.3f}' "
            f"aria-valuemin=0 aria-valuemax=1><span style='width:{filled * 100:.1f}%'>"
            f"</span></span><span class=pct>{percent(ratio)}</span>")


def figure(text: str, extra: str = "") -> str:
    unknown = " unknown-text" if text == UNKNOWN else ""
    return f"<td class='n{unknown}{extra}'>{escape(text)}</td>"


def gpus_cell(models: Sequence[InstanceGpus] | None) -> str:
    """What an Instance holds per model, its unhealthy GPUs marked; or no GPU data."""
    if not models:
        return "<span class=unknown-text>no GPU data</span>"
    return ", ".join(f"{g.healthy + g.unhealthy} {escape(g.model)}"
                     + (f" <span class=bad>({g.unhealthy} unhealthy)</span>"
                        if g.unhealthy else "") for g in models)


def legend(*entries: tuple[str, str]) -> str:
    return "<p class=legend>" + "<br>".join(
        f"<b>{escape(name)}</b>: {escape(LEGEND[key])}" for name, key in entries) + "</p>"


def table(headers: Iterable[str], rows: Iterable[str], name: str) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    return f"<table id={name}><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
