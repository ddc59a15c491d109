"""The fleet page's "What can I stop" section, drawn from status/idle_view.py.

Idle Instances first, longest idle first, with the cards each holds; then per GPU
model the cards they hold beside the fleet's used, free and unhealthy; then, apart,
the Instances whose idleness is unknown, and the pools where nothing measures it.
"""

from __future__ import annotations

from html import escape

from poolscope.scheduler_bridge.status.html import figure, gpus_cell, legend, table
from poolscope.scheduler_bridge.status.idle_view import HeldGpus, IdleInstance, IdleView
from poolscope.scheduler_bridge.status.model import count, duration
from poolscope.scheduler_bridge.status.pool_view import ALIVE, STALE

ANCHOR = "what-can-i-stop"
IDLE_HEADERS = ("Pool", "Instance", "Idle for", "State", "GPUs held")
UNKNOWN_HEADERS = ("Pool", "Instance", "State", "GPUs held")
HELD_HEADERS = ("Model", "Total", "Used", "Free", "Unhealthy", "Held by idle",
                "Held, idle unknown")


def render_idle_section(view: IdleView | None, error: str | None) -> str:
    """The section; a view that could not be read is its reason, never an empty list
    (which would say that nothing can be stopped)."""
    head = f"<h2 id={ANCHOR}>What can I stop</h2>"
    if view is None:
        return f"{head}<p class=stale>The Instances could not be read: {escape(error or '?')}</p>"
    parts = [head, f"<p class=legend>Instances with no dispatch for more than "
                   f"{view.idle_threshold_s:g} s, longest first.</p>"]
    parts += [f"<p class=stale>{escape(note)}</p>" for note in view.disagreements()]
    idle = view.idle_instances
    parts.append(table(IDLE_HEADERS, map(_idle_row, idle), "idle-instances") if idle else
                 f"<p>No Instance idle for more than {view.idle_threshold_s:g} s.</p>")
    if view.gpu_models:
        parts += ["<h3>GPUs held, per model</h3>",
                  table(HELD_HEADERS, map(_held_row, view.gpu_models), "idle-gpus")]
    unknown = view.unknown_instances
    if unknown:
        parts += ["<h3>Idle unknown: never dispatched to since their Proxy started "
                  "(not idle)</h3>",
                  table(UNKNOWN_HEADERS, map(_unknown_row, unknown), "idle-unknown")]
    if view.unmeasured:
        parts.append(f"<p class=unknown-text>Idleness not measured in "
                     f"{escape(', '.join(view.unmeasured))}.</p>")
    parts.append(legend(("GPUs held", "held"), ("Idle unknown", "idle_unknown"),
                        ("Not measured", "unmeasured")))
    return "".join(parts)


def _cells(i: IdleInstance) -> tuple[str, str]:
    """The row's key attributes and its pool and Instance cells."""
    return (f"data-pool='{escape(i.proxy_id)}' data-instance='{escape(i.instance_id)}'",
            f"<td>{escape(i.proxy_id)}</td><td>{escape(i.instance_id)}</td>")


def _state(i: IdleInstance) -> str:
    name, cls = {True: (ALIVE, "q-complete"), False: (STALE, "q-missing")}.get(
        i.alive, ("?", "unknown-text"))
    return f"<td class='{cls}'>{name}</td>"


def _idle_row(i: IdleInstance) -> str:
    attrs, ids = _cells(i)
    return (f"<tr {attrs}>{ids}{figure(duration(i.idle_s))}{_state(i)}"
            f"<td>{gpus_cell(i.gpus)}</td></tr>")


def _unknown_row(i: IdleInstance) -> str:
    attrs, ids = _cells(i)
    return f"<tr {attrs}>{ids}{_state(i)}<td>{gpus_cell(i.gpus)}</td></tr>"


def _held_row(g: HeldGpus) -> str:
    figures = "".join(figure(count(n)) for n in (g.total, g.used, g.free, g.unhealthy))
    return (f"<tr data-model='{escape(g.model)}'><td>{escape(g.model)}</td>{figures}"
            f"{figure(count(g.idle), ' fleet')}{figure(count(g.idle_unknown))}</tr>")
