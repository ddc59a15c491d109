"""The soak over time: the fleet's members (ever and alive), then one panel per kind of
figure with a line per component, the warm-up and end windows shaded.

Imported only for --plot, so the soak runs without matplotlib otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.figure import Figure

from bench.churn.probe import ANSWER, FDS, HEAD_SERIES, RSS, SERIES, Sample
from bench.churn.verdict import FLEET, MEMBERS_ALIVE, MEMBERS_EVER, Windows

PANELS = ((FLEET, "members"), (RSS, "RSS (MiB)"), (FDS, "open fds"),
          (SERIES, "series on /metrics"), (HEAD_SERIES, "Prometheus head series"),
          (ANSWER, "bridge answer (bytes)"))


def draw(samples: Sequence[Sample], windows: Windows, out: Path) -> None:
    fig = Figure(figsize=(9, 2.0 * len(PANELS) + 0.6))
    axes = fig.subplots(len(PANELS), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (figure, title) in zip(axes, PANELS, strict=True):
        ax.axvspan(windows.warmup_from, windows.warmup_to, color="0.9", lw=0)
        ax.axvspan(windows.end_from, windows.end_to, color="0.9", lw=0)
        if figure == FLEET:
            lines = {name: [s for s in samples if s.component == FLEET and s.figure == name]
                     for name in (MEMBERS_EVER, MEMBERS_ALIVE)}
        else:
            lines = {}
            for s in samples:
                if s.figure == figure and s.component != FLEET:
                    lines.setdefault(s.component, []).append(s)
        for name, points in sorted(lines.items()):
            ax.plot([p.t_s for p in points], [p.value for p in points], label=name, lw=1)
        ax.set_ylabel(title)
        ax.set_ylim(bottom=0)
        if lines:
            ax.legend(loc="upper left", fontsize="x-small", ncol=3)
    axes[-1].set_xlabel("seconds of churn; grey: the warm-up and end windows compared")
    fig.suptitle("Churn soak: every component against the members that ever existed")
    fig.tight_layout()
    fig.savefig(out, dpi=80)
