"""Latency over time at 70% load: one panel per policy, a point per request by its pool.

Imported only for --plot, so the benchmark runs without matplotlib otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.figure import Figure

from bench.scheduling.loop import Record, local_on_spans
from bench.scheduling.outcome import Row
from bench.scheduling.policies import POLICIES

PLOTTED_LOAD = 0.7
COLOURS = {"pool-a": "tab:blue", "pool-b": "tab:orange", "pool-c": "tab:green"}


def latency_over_time(results: Sequence[tuple[Row, list[Record]]], out: Path) -> list[Path]:
    """Per backend, each policy's first seed at 70% and its largest interval; the files
    written (one per backend, the backend's name added when there are several)."""
    chosen: dict[tuple[str, str], tuple[float, list[Record]]] = {}
    first_seed = min(row.cell.seed for row, _ in results) if results else 0
    for row, records in results:
        cell = row.cell
        if (abs(cell.load - PLOTTED_LOAD) > 1e-9 or cell.seed != first_seed or cell.offset_s
                or cell.replicas != 1):
            continue
        key = (row.backend, cell.policy)
        # A policy that reads no summary has one cell (no interval); else the largest.
        interval = -1.0 if cell.interval_s is None else cell.interval_s
        if key not in chosen or interval >= chosen[key][0]:
            chosen[key] = (interval, records)
    if not chosen:
        raise SystemExit("--plot: no cell at 70% load was run")
    backends = sorted({b for b, _ in chosen})
    written = []
    for backend in backends:
        panels = [p for p in POLICIES if (backend, p) in chosen]
        fig = Figure(figsize=(9, 1.6 * len(panels) + 0.8))
        axes = fig.subplots(len(panels), 1, sharex=True, sharey=True, squeeze=False)[:, 0]
        for ax, policy in zip(axes, panels, strict=True):
            records = chosen[(backend, policy)][1]
            for on, off in local_on_spans(max(r.arrival for r in records)):
                ax.axvspan(on, off, color="0.9", lw=0)
            for pool, colour in COLOURS.items():
                mine = [r for r in records if r.pool == pool and r.end is not None]
                ax.scatter([r.arrival for r in mine],
                           [r.end - r.arrival for r in mine if r.end is not None],
                           s=6, color=colour, label=pool)
            ax.set_yscale("log")
            ax.set_ylabel(policy, rotation=0, ha="right", va="center")
        axes[0].legend(loc="upper left", ncol=3, fontsize="small")
        axes[-1].set_xlabel("arrival (s); grey: local traffic on pool-b")
        fig.suptitle(f"{backend}: end-to-end latency (s, log) per request at 70% load")
        fig.tight_layout()
        path = out if len(backends) == 1 else out.with_stem(f"{out.stem}-{backend}")
        fig.savefig(path, dpi=90)
        written.append(path)
    return written
