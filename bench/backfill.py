"""Hours of history for the series rules read over long windows, written into a bench Prometheus.

A Prometheus started for a benchmark holds minutes of data, so a rule reading
`x[6h]` reads minutes of samples there and six hours of them in production: its
cost there is not the one an operator pays. Here every range selector of the rule
files longer than the warm-up (`long_windows`) is asked of the running Prometheus
once its rules have run over the full fleet, and each series it matches gets the
window's length of history before the head's first sample (`backfill`): one sample
per interval it is written at (the scrape interval for a scraped series, its
group's for a recorded one), holding its present value, so no alert fires that
would not fire on the live data. `promtool tsdb create-blocks-from openmetrics`
(the documented way to backfill) turns them into blocks; moved into Prometheus'
data directory, they are loaded at its next scan of its blocks (once a minute),
which `backfill` waits for by counting the samples each window reads.

The Prometheus must keep them: its retention longer than the history, and no
compaction of the backfilled blocks while it is measured (HISTORY_FLAGS: blocks
stay 2 h long, as Prometheus writes them for its first hours), which would charge
the rules for the compactor's CPU.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness.polling import eventually
from harness.prometheus import Prometheus, binary

# Prometheus' hidden block-duration flags: equal, so it never compacts blocks into
# longer ones (the backfilled 2 h blocks stay as promtool wrote them).
HISTORY_FLAGS = ("--storage.tsdb.min-block-duration=2h", "--storage.tsdb.max-block-duration=2h")
LONGER_THAN_S = 600.0  # a window this long is filled by the warm-up no more

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
# A vector selector with a range: an optional metric name, optional matchers, `[range]`.
_RANGE_SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)?(\{[^}]*\})?\[([0-9a-z]+)\]")


def duration_s(text: str) -> float:
    """A Prometheus duration (`6h`, `1h30m`) in seconds; ValueError when it is none."""
    parts = _DURATION.findall(text)
    if not text or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return sum(int(n) * _UNITS[u] for n, u in parts)


@dataclass(frozen=True)
class Window:
    """A selector some rule reads over `range_s`, whose series are written every `step_s`."""

    selector: str
    range_s: float
    step_s: float


def long_windows(files: Sequence[Path], scrape_interval_s: float, evaluation_interval_s: float,
                 longer_than_s: float = LONGER_THAN_S) -> list[Window]:
    """Every range selector of the rules longer than `longer_than_s`, once (its longest range).

    A recorded series is written at its group's interval (the global evaluation
    interval for a group without one); any other series at the scrape interval.
    """
    groups = [g for f in files for g in yaml.safe_load(f.read_text())["groups"]]
    written = {r["record"]: duration_s(g["interval"]) if "interval" in g else evaluation_interval_s
               for g in groups for r in g["rules"] if "record" in r}
    found: dict[str, Window] = {}
    for rule in (r for g in groups for r in g["rules"]):
        for m in _RANGE_SELECTOR.finditer(rule["expr"]):
            name, matchers, range_text = m.groups()
            if not (name or matchers):
                continue
            try:
                range_s = duration_s(range_text)
            except ValueError:
                continue  # a subquery's `[a:b]` or an index, not a range selector
            selector = (name or "") + (matchers or "")
            if range_s > longer_than_s and range_s > found.get(selector, Window("", 0, 0)).range_s:
                found[selector] = Window(selector, range_s,
                                         written.get(name or "", scrape_interval_s))
    return sorted(found.values(), key=lambda w: w.selector)


def _api(prom: Prometheus, path: str, params: dict[str, str] | None = None) -> Any:
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    with urllib.request.urlopen(f"{prom.url}{path}{query}", timeout=120) as r:
        return json.load(r)["data"]


def _labels(metric: dict[str, str]) -> str:
    def escaped(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return ",".join(f'{k}="{escaped(v)}"' for k, v in sorted(metric.items()) if k != "__name__")


Series = tuple[dict[str, str], str, Sequence[float]]  # labels with __name__, value, timestamps


def write_openmetrics(out: Path, series: Iterable[Series]) -> int:
    """One OpenMetrics file of (labels with __name__, value, timestamps) series; samples written.

    A family's samples must be contiguous, so series are written by name.
    """
    by_name: dict[str, list[Series]] = {}
    for metric, value, stamps in series:
        by_name.setdefault(metric["__name__"], []).append((metric, value, stamps))
    written = 0
    with out.open("w") as f:
        for name, members in sorted(by_name.items()):
            for metric, value, stamps in members:
                prefix = f"{name}{{{_labels(metric)}}} {value} "
                f.write("".join(f"{prefix}{t:.3f}\n" for t in stamps))
                written += len(stamps)
        f.write("# EOF\n")
    return written


def _present(prom: Prometheus, window: Window) -> list[dict[str, Any]]:
    """The window's series now; a group writing them once a minute may not have yet, so
    wait one of its intervals (and a little) before taking none for an answer."""
    deadline = time.monotonic() + window.step_s + 30
    while not (live := prom.query(window.selector)) and time.monotonic() < deadline:
        time.sleep(1.0)
    return live


def backfill(prom: Prometheus, windows: Sequence[Window], history_s: float,
             timeout: float = 300.0) -> int:
    """Give every series of `windows` up to `history_s` of samples before Prometheus' head.

    Returns the samples written; returns once Prometheus reads them (each window's
    every series counts at least 90% of the samples it should).
    """
    head_start = _api(prom, "/api/v1/status/tsdb")["headStats"]["minTime"] / 1000
    data = prom.workdir / "data"
    with tempfile.TemporaryDirectory(prefix="backfill-", dir=prom.workdir) as tmp:
        series: dict[str, Series] = {}
        expected: dict[str, int] = {}
        for w in windows:
            span = min(w.range_s, history_s)
            stamps = [head_start - i * w.step_s for i in range(int(span // w.step_s), 0, -1)]
            live = _present(prom, w)
            if live:  # a window over series this fleet has none of reads nothing anyway
                expected[w.selector] = len(stamps)
            for s in live:
                key = json.dumps(s["metric"], sort_keys=True)
                if key not in series or len(series[key][2]) < len(stamps):
                    series[key] = (s["metric"], s["value"][1], stamps)
        written = write_openmetrics(Path(tmp) / "history.om", series.values())
        blocks = Path(tmp) / "blocks"
        subprocess.run([binary("promtool"), "tsdb", "create-blocks-from", "openmetrics",
                        "--quiet", str(Path(tmp) / "history.om"), str(blocks)],
                       check=True, stdout=subprocess.DEVNULL)
        for block in blocks.iterdir():
            os.rename(block, data / block.name)
    for w in (w for w in windows if w.selector in expected):
        least = f"min(count_over_time({w.selector}[{int(min(w.range_s, history_s))}s]))"
        # A count over hours of every pool's samples: longer than a test's query timeout.
        eventually(lambda q=least: _api(prom, "/api/v1/query", {"query": q})["result"],
                   lambda r, n=expected[w.selector]: bool(r) and float(r[0]["value"][1]) >= 0.9 * n,
                   timeout, f"Prometheus reads the history backfilled for {w.selector}", every=5.0)
    return written
