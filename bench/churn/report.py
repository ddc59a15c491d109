"""The soak's record: every sample as CSV (one row per time, component and figure), the
verdict and the run's counts as JSON, and the table and failure lines it prints."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from pathlib import Path

from bench.churn.probe import Sample
from bench.churn.soak import Result
from bench.churn.verdict import MEMBERS_ALIVE, MEMBERS_EVER, Figure, Verdict


def write_samples(samples: Sequence[Sample], path: Path) -> None:
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["t_s", "component", "figure", "value"])
        writer.writerows((f"{s.t_s:.1f}", s.component, s.figure, f"{s.value:g}")
                         for s in samples)


def write_result(result: Result, path: Path) -> None:
    path.write_text(json.dumps(result.as_json(), indent=1) + "\n")


def _shown(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}".removesuffix(".0")


def _ratio(figure: Figure) -> str:
    return "∞" if math.isinf(figure.ratio) else f"{figure.ratio:.2f}"


def table(verdict: Verdict) -> str:
    """Each figure at warm-up and at the end, the fleet's counts first; a figure with a
    warm-up of its own says when it began, one the run was too short for says so."""
    w = verdict.windows
    lines = [f"warm-up {w.warmup_from:.0f}-{w.warmup_to:.0f} s, end {w.end_from:.0f}-"
             f"{w.end_to:.0f} s (medians); bound {verdict.bound:g}x", "",
             "| component | figure | warm-up | end | end / warm-up |",
             "|---|---|---:|---:|---:|"]
    for f in (*verdict.fleet, *verdict.figures):
        name = f.figure
        if not f.judged:
            name += " (not judged: its memory outlasts the run)"
        elif f.windows != w:
            name += f" (warm-up from {f.windows.warmup_from:.0f} s)"
        lines.append(f"| {f.component} | {name} | {_shown(f.warmup)} | {_shown(f.end)} | "
                     f"{_ratio(f)} |")
    return "\n".join(lines)


def failures(verdict: Verdict) -> list[str]:
    """One line per figure that grew past the bound, beside the members' own growth."""
    ever = verdict.fleet_figure(MEMBERS_EVER)
    alive = verdict.fleet_figure(MEMBERS_ALIVE)
    beside = (f"while members ever grew {_ratio(ever)}x ({_shown(ever.warmup)} -> "
              f"{_shown(ever.end)}) and alive {_ratio(alive)}x")
    lines = [f"FAIL: {f.label()} grew {_ratio(f)}x ({_shown(f.warmup)} -> {_shown(f.end)}) "
             f"{beside}; bound {verdict.bound:g}x" for f in verdict.grew]
    if not verdict.judged:
        lines.append("FAIL: no figure was judged")
    return lines
