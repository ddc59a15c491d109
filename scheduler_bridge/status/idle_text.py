"""`poolscope-status --idle`: what can I stop, as a terminal screen (the view:
status/idle_view.py; the fleet page draws the same view as HTML)."""

from __future__ import annotations

import textwrap

from poolscope.scheduler_bridge.status.idle_view import IdleInstance, IdleView
from poolscope.scheduler_bridge.status.model import LEGEND, count, duration, timestamp
from poolscope.scheduler_bridge.status.pool_view import ALIVE, STALE, gpus_text
from poolscope.scheduler_bridge.status.text import (
    MAX_ID,
    NO_GPU_DATA,
    Cell,
    Style,
    banner,
    clip,
    paint,
    table,
)

IDLE_HEADERS = ("POOL", "INSTANCE", "IDLE FOR", "STATE", "GPUS HELD")
UNKNOWN_HEADERS = ("POOL", "INSTANCE", "STATE", "GPUS HELD")
HELD_HEADERS = ("MODEL", "TOTAL", "USED", "FREE", "UNHEALTHY", "HELD BY IDLE",
                "HELD, IDLE?")


def render_idle_text(view: IdleView, style: Style) -> str:
    threshold = f"{view.idle_threshold_s:g} s"
    lines = [paint(f"poolscope status: what can I stop, at {timestamp(view.generated_at)}, "
                   f"age {view.age()}", "head", style), *banner(view.stale, view.age_s, style)]
    lines += [paint(note, "high", style) for note in view.disagreements()]
    idle = view.idle_instances
    lines += ["", paint(f"IDLE: no dispatch for more than {threshold}, longest first", "head",
                        style)]
    lines += (table(IDLE_HEADERS, lambda _: [_row(i, style, idle=True) for i in idle], style,
                    gauges=(), words=(4,)) if idle
              else [f"no Instance idle for more than {threshold}"])
    if view.gpu_models:
        model_w = min(MAX_ID, max(len(g.model) for g in view.gpu_models))
        lines += ["", paint("GPUs HELD PER MODEL", "head", style), *table(
            HELD_HEADERS, lambda _: [[
                (clip(g.model, model_w, style), None), (count(g.total), None),
                (count(g.used), None), (count(g.free), None),
                (count(g.unhealthy), "high" if g.unhealthy else None),
                (count(g.idle), "warn" if g.idle else None), (count(g.idle_unknown), None)]
                for g in view.gpu_models], style, gauges=())]
    unknown = view.unknown_instances
    if unknown:
        lines += ["", paint("IDLE UNKNOWN: never dispatched to since their Proxy started "
                            "(not idle)", "head", style),
                  *table(UNKNOWN_HEADERS, lambda _: [_row(i, style, idle=False)
                                                     for i in unknown], style, gauges=(),
                         words=(3,))]
    if view.unmeasured:
        lines += ["", paint(f"idleness not measured in {', '.join(view.unmeasured)}",
                            "unknown", style)]
    lines += ["", *textwrap.wrap(f"GPUS HELD: {LEGEND['held']}; IDLE?: "
                                 f"{LEGEND['idle_unknown']}; not measured: "
                                 f"{LEGEND['unmeasured']}", style.width)]
    return "\n".join(lines)


def _row(i: IdleInstance, style: Style, *, idle: bool) -> list[Cell]:
    state: Cell = {True: (ALIVE, "ok"), False: (STALE, "high")}.get(i.alive, ("?", "unknown"))
    gpus = gpus_text(i.gpus or ())
    cells: list[Cell] = [(clip(i.proxy_id, MAX_ID, style), None),
                         (clip(i.instance_id, MAX_ID, style), None)]
    if idle:
        cells.append((duration(i.idle_s), None))
    return [*cells, state, (clip(gpus, 2 * MAX_ID, style) if gpus else NO_GPU_DATA,
                            None if gpus else "unknown")]
