"""What the soak records of each component, read from outside as an operator would see
it: /proc for its resident memory and open file descriptors, its own /metrics for the
series it exposes (and a few values, such as Prometheus' head series), and for a bridge
the size of the answer its clients read.

A component may be several processes of one kind (the Instance exporters of the members
alive now): its figure is then their median, since every one of them should hold the
same, whatever the fleet went through before it started.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from poolscope.exporters.common.promtext import select

READ_TIMEOUT_S = 10.0
# Figures a component is judged on: each must stay flat while the fleet churns.
RSS, FDS, SERIES, ANSWER = "rss_mib", "fds", "series", "answer_bytes"
HEAD_SERIES = "prometheus_tsdb_head_series"
# A counter of the churn itself, recorded to show that forgetting happened; it grows
# with the members that crashed by design, so it is never judged.
FORGOTTEN = "poolscope_proxy_instances_forgotten_total"
NOT_JUDGED = frozenset({FORGOTTEN})


@dataclass(frozen=True)
class Watched:
    """One process of a component, and where to read it."""

    pid: int
    metrics_url: str | None = None
    answer_url: str | None = None  # a bridge's answer, whose size is recorded
    values: tuple[str, ...] = ()  # metrics on its page recorded as figures (summed)


@dataclass(frozen=True)
class Sample:
    t_s: float  # since the soak's fleet was up
    component: str
    figure: str
    value: float


def rss_mib(pid: int) -> float:
    """VmRSS of /proc/<pid>/status, in MiB."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise ProcessLookupError(pid)  # a zombie has no VmRSS


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def series_on(page: str) -> int:
    """Sample lines on a text exposition page: the series a scrape stores."""
    return sum(1 for line in page.splitlines() if line and not line.startswith("#"))


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=READ_TIMEOUT_S) as answer:
        body: bytes = answer.read()
    return body


def read(process: Watched) -> dict[str, float]:
    """Every figure of one process; one it could not read (it died a moment ago, a
    page timed out) is left out, never recorded as a zero."""
    figures: dict[str, float] = {}
    try:
        figures[RSS] = rss_mib(process.pid)
        figures[FDS] = open_fds(process.pid)
    except (FileNotFoundError, ProcessLookupError):
        return {}
    if process.metrics_url is not None:
        with contextlib.suppress(OSError):
            page = _get(process.metrics_url).decode()
            figures[SERIES] = series_on(page)
            for name, found in select(page, process.values).items():
                figures[name] = sum(value for _, value in found)
    if process.answer_url is not None:
        with contextlib.suppress(OSError):
            figures[ANSWER] = len(_get(process.answer_url))
    return figures


def sample(t_s: float, components: Mapping[str, Sequence[Watched]]) -> list[Sample]:
    """Each component's figures now: one process's, or the median of its processes'."""
    samples = []
    for component, processes in components.items():
        read_each = [read(p) for p in processes]
        for figure in sorted({f for figures in read_each for f in figures}):
            values = [figures[figure] for figures in read_each if figure in figures]
            samples.append(Sample(t_s, component, figure, statistics.median(values)))
    return samples
