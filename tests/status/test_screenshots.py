"""The status pages and the Prometheus console as a person sees them, on the real stack:
the demo cluster with simulated GPUs (simulated engines, real Instance exporters, demo
Proxies, a real Prometheus with the project's rules, the Scheduler bridge), walked through
three states:

1. healthy: every Instance of pool-1 alive, with fresh resource data;
2. stale: one Instance's engine crashed, so its heartbeats stopped (its exporter serves on);
3. missing: another Instance's exporter stopped, so it is alive without resource data.

Each state is awaited in the bridge's JSON, then in the DOM Chromium renders of each page;
the screenshot is taken by that same rendering, so it shows what was asserted.
POOLSCOPE_UPDATE_SCREENSHOTS=1 copies the shots into docs/screenshots/
(test_screenshot_files.py checks that they are kept).

The walk is one test: each state builds on the one before, and pytest-xdist may hand the
tests of one module to different workers.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from dashboards import CONSOLE_PATH
from deploy.demo.cluster import SIMULATED_MODELS, Cluster
from harness.cluster import demo_cluster
from harness.polling import eventually
from poolscope.contract.thresholds import FRESH_S
from poolscope.scheduler_bridge.status.model import UNKNOWN
from poolscope.scheduler_bridge.status.pool_view import (
    ALIVE,
    FRESH,
    MISSING,
    STALE,
    UNREGISTERED,
)
from tests.dashboards.console_page import pool_rows
from tests.dashboards.test_console import MEASURED_CELLS, NO_DATA
from tests.status.test_page import Elements
from tests.status.test_screenshot_files import WINDOWS, screenshot
from tests.support.chromium import chromium, png_size

pytestmark = pytest.mark.integration


def instance_ids(pool: str) -> tuple[str, ...]:
    return tuple(f"{pool}-inst-{k}" for k in (1, 2, 3))


POOL = "pool-1"
POOLS = (POOL, "pool-2")
INSTANCES = instance_ids(POOL)
CRASHED, UNSCRAPED = INSTANCES[1], INSTANCES[2]
SCRAPE_INTERVAL_S = 1.0
# A heartbeat timeout plus scrapes and evaluations, on a loaded machine.
WAIT_S = 120.0
# The flaky simulated GPU fails only this long after its exporter starts: the shots show
# the states walked, not wherever its schedule happens to be.
NEVER_FLAKY_S = 86400.0
NO_GPU_DATA = "no GPU data"
# The console cells that must be measured in every state. Not the QPS: it is a rate over
# RATE_WINDOW_S, which a cluster this young may not have yet (and then shows "no data").
CONSOLE_MEASURED = (*(c for c in MEASURED_CELLS if c != "qps"), "gpu")
CONSOLE_INSTANCES = re.compile(
    r"(?P<alive>\S+) / (?P<total>\S+) stale (?P<stale>\S+), missing resource (?P<missing>\S+)")

Reading = dict[str, object]
COUNT = "missing"  # the pool's Missing count, in every reading


@dataclass(frozen=True)
class State:
    """One state of the walk: the Instances of the pool whose heartbeats stopped, and the
    alive ones without fresh resource data; what each view must show of it."""

    name: str
    stale: frozenset[str] = frozenset()
    missing: frozenset[str] = frozenset()

    def instances(self) -> dict[str, tuple[str, str, bool]]:
        """Each Instance as (state, resource data, has GPU data)."""
        return {i: (STALE if i in self.stale else ALIVE,
                    MISSING if i in self.missing else FRESH, i not in self.missing)
                for i in INSTANCES}

    def counts(self, pool: str) -> tuple[str, str]:
        """A pool's Alive and Stale counts, as the pages print them."""
        stale = len(self.stale) if pool == POOL else 0
        return str(len(INSTANCES) - stale), str(stale)

    def gpus(self, *pools: str) -> dict[str, str]:
        """GPUs per model over `pools`: those of every Instance whose exporter serves
        (cluster.simulated_gpus hands the models out by turns)."""
        totals: Counter[str] = Counter()
        for pool in pools:
            for k, instance in enumerate(instance_ids(pool)):
                model, _, count = SIMULATED_MODELS[k % len(SIMULATED_MODELS)].rpartition(":")
                totals[model] += 0 if instance in self.missing else int(count)
        return {model: str(n) for model, n in totals.items() if n}

    def pool(self) -> Reading:
        """What the JSON and the pool page must both say of the pool."""
        return {"counts": self.counts(POOL), "instances": self.instances(),
                "gpus": self.gpus(POOL), "trend": True, COUNT: str(len(self.missing))}

    def fleet(self) -> Reading:
        return {"counts": {p: self.counts(p) for p in POOLS}, "gpus": self.gpus(*POOLS),
                "links": [f"status/pools/{p}" for p in POOLS], "trends": len(POOLS),
                COUNT: str(len(self.missing))}

    def console(self) -> Reading:
        return {"counts": {p: self.counts(p) for p in POOLS},
                "no data": {p: [] for p in POOLS}, COUNT: str(len(self.missing))}


HEALTHY = State("healthy")
ONE_STALE = State("stale", stale=frozenset({CRASHED}))
ONE_MISSING = State("missing", stale=frozenset({CRASHED}), missing=frozenset({UNSCRAPED}))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with demo_cluster(tmp_path_factory.mktemp("screenshots"), proxies=len(POOLS),
                      instances=len(INSTANCES), rate=3.0, scrape_interval=SCRAPE_INTERVAL_S,
                      simulate_gpus=True, flaky_gpu_period=NEVER_FLAKY_S) as c:
        yield c


# --- readings: each view, in the terms of a State ----------------------------------

@dataclass
class Row:
    attrs: dict[str, str | None]
    cells: list[str] = field(default_factory=list)


class Tables(Elements):
    """Each table's rows by the table's id, a row's cells named by the table's headers."""

    def __init__(self, html: str) -> None:
        self._rows: dict[str, list[Row]] = {}
        self._headers: dict[str, list[str]] = {}
        self._table = ""
        self._text: list[str] | None = None
        super().__init__(html)

    def rows(self, table: str, key: str) -> dict[str, dict[str, str]]:
        """The rows of `table` by their `key` attribute."""
        headers = self._headers.get(table, [])
        return {str(r.attrs[key]): dict(zip(headers, r.cells, strict=False))
                for r in self._rows.get(table, ()) if r.attrs.get(key)}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        super().handle_starttag(tag, attrs)
        if tag == "table":
            self._table = str(dict(attrs).get("id"))
            self._headers[self._table], self._rows[self._table] = [], []
        elif tag == "tr":
            self._rows[self._table].append(Row(dict(attrs)))
        elif tag in ("th", "td"):
            self._text = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("th", "td") and self._text is not None:
            text = " ".join("".join(self._text).split())
            (self._headers[self._table] if tag == "th"
             else self._rows[self._table][-1].cells).append(text)
            self._text = None

    def handle_data(self, data: str) -> None:
        super().handle_data(data)
        if self._text is not None:
            self._text.append(data)

    def trends(self) -> int:
        return sum(tag == "svg" and a.get("class") == "trend" for tag, a in self.tags)


def pool_detail(cluster: Cluster) -> dict[str, Any]:
    url = f"{cluster.scheduler_bridge_url}/debug/pool_detail/{POOL}"
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            doc: dict[str, Any] = json.loads(r.read())
    except urllib.error.HTTPError as e:  # no snapshot yet, or none with the pool
        return {"status": e.code}
    except OSError as e:  # a slow or refused answer on a loaded box: asked again
        return {"status": repr(e)}
    return doc


def _liveness(row: Mapping[str, Any]) -> str:
    if row["registered"] is False:
        return UNREGISTERED
    return {True: ALIVE, False: STALE}.get(row["alive"], UNKNOWN)


def _resource(row: Mapping[str, Any]) -> str:
    age = row["host_sample_age_s"]  # what the pool's with_resource count compares
    return FRESH if age is not None and age <= FRESH_S else MISSING


def json_reading(doc: Mapping[str, Any]) -> Reading:
    local = doc.get("local")
    if local is None:
        return {"unread": {k: doc.get(k) for k in ("status", "local_error")}}
    summary = doc["summary"]
    counts = summary["instances"]
    return {"counts": (str(counts["alive"]), str(counts["stale"])),
            "instances": {i["instance_id"]: (_liveness(i), _resource(i), bool(i["gpus"]))
                          for i in local["instances"]},
            "gpus": {m: UNKNOWN if None in (g["healthy"], g["unhealthy"])
                     else str(g["healthy"] + g["unhealthy"])
                     for m, g in (summary["gpus"] or {}).items()},
            "trend": doc["trends"] is not None and POOL in doc["trends"]["pools"],
            COUNT: str(counts["missing_resource"])}


def _totals(page: Tables, table: str) -> dict[str, str]:
    return {model: row["Total"] for model, row in page.rows(table, "data-model").items()}


def fleet_reading(dom: str) -> Reading:
    page = Tables(dom)
    pools = page.rows("pools", "data-pool")
    return {"counts": {p: (r["Alive"], r["Stale"]) for p, r in pools.items()},
            "gpus": _totals(page, "fleet-gpus"),
            "links": sorted(str(a["href"]) for tag, a in page.tags
                            if tag == "a" and str(a.get("href")).startswith("status/pools/")),
            "trends": page.trends(), COUNT: pools.get(POOL, {}).get("Missing")}


def pool_reading(dom: str) -> Reading:
    page = Tables(dom)
    pool = page.rows("pool", "data-pool").get(POOL, {})
    return {"counts": (pool.get("Alive"), pool.get("Stale")),
            "instances": {i: (r["State"], r["Resource data"].partition(" ")[0],
                              r["GPUs"] != NO_GPU_DATA)
                          for i, r in page.rows("instances", "data-instance").items()},
            "gpus": _totals(page, "gpus"), "trend": page.trends() == 1,
            COUNT: pool.get("Missing")}


def console_reading(dom: str) -> Reading:
    rows = pool_rows(dom)
    cells = {p: CONSOLE_INSTANCES.fullmatch(r["instances"]) for p, r in rows.items()}
    own = cells.get(POOL)
    return {"counts": {p: (m["alive"], m["stale"]) if m else rows[p]["instances"]
                       for p, m in cells.items()},
            "no data": {p: [c for c in CONSOLE_MEASURED if NO_DATA in r[c]]
                        for p, r in rows.items()},
            COUNT: own["missing"] if own else None}


# --- the walk ---------------------------------------------------------------------

def render(tmp_path: Path, url: str, shot: Path, window: tuple[int, int]) -> str | None:
    """The DOM Chromium renders of `url`, screenshotted into `shot` from the same load;
    None when Chromium failed or hung this once (a loaded box), to be asked again."""
    try:
        return chromium(tmp_path, f"--window-size={window[0]},{window[1]}", "--dump-dom",
                        f"--screenshot={shot}", url)
    except (AssertionError, subprocess.TimeoutExpired):
        return None


def page_in_state(tmp_path: Path, state: State, page: str, url: str,
                  read: Callable[[str], Reading], expected: Reading) -> Reading:
    """Render `page` until it shows `state`; keep its screenshot."""
    shot = tmp_path / f"{page}-{state.name}.png"
    def reading() -> Reading | None:
        dom = render(tmp_path, url, shot, WINDOWS[page])
        return None if dom is None else read(dom)

    seen = eventually(reading, lambda r: r == expected, WAIT_S,
                      f"{state.name}: {url} in Chromium", every=1.0)
    assert png_size(shot) == WINDOWS[page]
    if os.environ.get("POOLSCOPE_UPDATE_SCREENSHOTS") == "1":
        shutil.copyfile(shot, screenshot(page, state.name))
    return seen


def check_state(cluster: Cluster, tmp_path: Path, state: State) -> None:
    """`state` in the JSON, then in each page."""
    eventually(lambda: json_reading(pool_detail(cluster)), lambda r: r == state.pool(),
               WAIT_S, f"{state.name}: /debug/pool_detail/{POOL}")
    bridge = cluster.scheduler_bridge_url
    pages = (("status", f"{bridge}/status", fleet_reading, state.fleet()),
             ("pool", f"{bridge}/status/pools/{POOL}", pool_reading, state.pool()),
             ("console", f"{cluster.prometheus_url}{CONSOLE_PATH}", console_reading,
              state.console()))
    for page, url, read, expected in pages:
        page_in_state(tmp_path, state, page, url, read, expected)


# Twelve waits of up to WAIT_S, and the cluster's start, in one test: past the default.
@pytest.mark.timeout(900)
def test_the_pages_in_each_state(cluster: Cluster, tmp_path: Path) -> None:
    check_state(cluster, tmp_path, HEALTHY)
    cluster.crash_engine(CRASHED)
    check_state(cluster, tmp_path, ONE_STALE)
    cluster.stop_exporter(UNSCRAPED)
    check_state(cluster, tmp_path, ONE_MISSING)
