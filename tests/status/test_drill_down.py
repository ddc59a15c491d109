"""From the fleet to one pool: `/debug/pool_detail/{proxy_id}`, `/debug/pool_trends`,
the pool page, and `poolscope-status POOL`, over a canned Prometheus that answers the
pool's own series and the trends' range queries."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from poolscope.bridge.trends import TREND_POINTS
from tests.status.conftest import MakeBridge, StatusBridge
from tests.status.fleet import (
    DRILLED,
    blind_pool,
    busy_pool,
    drilled_instances,
    drilled_trend,
)
from tests.status.test_cli import status
from tests.status.test_page import Elements

DETAIL = f"/debug/pool_detail/{DRILLED}"
PAGE = f"/status/pools/{DRILLED}"


async def drilled(make_bridge: MakeBridge, **kw: Any) -> StatusBridge:
    return await make_bridge([*busy_pool(DRILLED), *blind_pool("batch-cpu")],
                             local={DRILLED: drilled_instances()},
                             matrix=drilled_trend(time.time()), **kw)


class Rows(Elements):
    """Table rows by an attribute, each as its cells' text; the first row of a key
    (the fleet page lists a pool again in its GPU table)."""

    def __init__(self, html: str, key: str) -> None:
        self.key = key
        self.rows: dict[str, list[str]] = {}
        self._row: list[str] | None = None
        self._in_cell = False
        super().__init__(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        super().handle_starttag(tag, attrs)
        attr = dict(attrs)
        if tag == "tr" and attr.get(self.key):
            key = str(attr[self.key])
            self._row = None if key in self.rows else self.rows.setdefault(key, [])
        elif tag == "td" and self._row is not None:
            self._row.append("")
            self._in_cell = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr":
            self._row = None
        elif tag == "td":
            self._in_cell = False

    def handle_data(self, data: str) -> None:
        super().handle_data(data)
        if self._row is not None and self._in_cell:
            self._row[-1] += data


# --- the JSON drill-down ----------------------------------------------------------

async def test_the_detail_is_the_summary_its_instances_and_its_trend(
        make_bridge: MakeBridge) -> None:
    bridge = await drilled(make_bridge)
    resp = await bridge.http.get(DETAIL)
    assert resp.status == 200
    doc = await resp.json()
    assert doc["summary"]["load"]["load_ratio"] == 0.62
    # The Instances are read at the snapshot's evaluation time, as the summary was.
    assert doc["local"]["generated_at"] == doc["generated_at"]
    assert [i["instance_id"] for i in doc["local"]["instances"]] == [
        "h100-a", "h100-b", "h100-c", "h100-d"]
    load = doc["trends"]["pools"][DRILLED]["load_ratio"]
    assert len(load) == TREND_POINTS and load[-1] == pytest.approx(0.7)
    assert None in load and 0 not in load  # the gap stays a gap
    assert (doc["local_error"], doc["trends_error"]) == (None, None)


@pytest.mark.parametrize(("pool", "status_"), [("a%22b", 400), ("nobody", 404)])
async def test_a_pool_to_drill_into_must_be_valid_and_known(
        make_bridge: MakeBridge, pool: str, status_: int) -> None:
    bridge = await drilled(make_bridge)
    for path in (f"/debug/pool_detail/{pool}", f"/status/pools/{pool}"):
        resp = await bridge.http.get(path)
        assert resp.status == status_, path
    # Refused before any query of its own: only the snapshot's were sent.
    assert bridge.prometheus.range_queries == []
    assert not any("proxy_id=" in q for q, _ in bridge.prometheus.queries)


async def test_unread_instances_are_null_with_why_and_the_summary_stands(
        make_bridge: MakeBridge) -> None:
    bridge = await drilled(make_bridge)
    assert (await bridge.http.get("/debug/proxy_pool_resources")).status == 200
    bridge.prometheus.fail_matching = "poolscope_collector_errors_total"  # one local query
    doc = await (await bridge.http.get(DETAIL)).json()
    assert doc["local"] is None and "canned failure" in doc["local_error"]
    assert doc["summary"]["load"]["load_ratio"] == 0.62 and doc["trends"] is not None
    page = Rows(await (await bridge.http.get(PAGE)).text(), "data-instance")
    assert page.rows == {} and any("could not be read" in t for t in page.text)


async def test_fleet_trends_and_their_failure(make_bridge: MakeBridge) -> None:
    bridge = await drilled(make_bridge)
    doc = await (await bridge.http.get("/debug/pool_trends")).json()
    assert set(doc["pools"]) == {DRILLED}  # batch-cpu has no point: absent, not zeros
    bridge.prometheus.fail_matching = "proxy_pool:saturation:ratio"
    bridge.prometheus.range_queries.clear()
    fleet = Rows(await (await bridge.http.get("/status")).text(), "data-pool")
    # Cached for the step: the fleet page reuses the read above rather than asking again.
    assert bridge.prometheus.range_queries == []
    assert len(fleet.rows[DRILLED]) == 12 and "?" not in fleet.rows[DRILLED][-1]


async def test_a_failed_trend_read_is_visibly_unknown(make_bridge: MakeBridge) -> None:
    bridge = await drilled(make_bridge)
    bridge.prometheus.fail_matching = "proxy_pool:saturation:ratio"
    resp = await bridge.http.get("/debug/pool_trends")
    assert resp.status == 503 and "canned failure" in (await resp.json())["cause"]
    fleet = Rows(await (await bridge.http.get("/status")).text(), "data-pool")
    assert fleet.rows[DRILLED][-1] == "?"
    assert any(t.startswith("Trends unavailable") for t in fleet.text)


# --- the pages --------------------------------------------------------------------

async def test_each_pool_links_to_its_page_and_the_page_back(make_bridge: MakeBridge) -> None:
    bridge = await drilled(make_bridge)
    fleet = Elements(await (await bridge.http.get("/status")).text())
    assert f"status/pools/{DRILLED}" in fleet.attrs("href")
    pool = Elements(await (await bridge.http.get(PAGE)).text())
    assert "../../status" in pool.attrs("href")


async def test_the_pool_page_shows_each_instance_state(make_bridge: MakeBridge) -> None:
    bridge = await drilled(make_bridge)
    resp = await bridge.http.get(PAGE)
    assert resp.status == 200 and resp.headers["Content-Security-Policy"].startswith(
        "default-src 'none'")
    page = Rows(await resp.text(), "data-instance")
    state = {i: cells[1] for i, cells in page.rows.items()}
    assert state == {"h100-a": "alive", "h100-b": "alive", "h100-c": "stale",
                     "h100-d": "alive"}
    assert page.rows["h100-a"][2].startswith("fresh")
    assert page.rows["h100-d"][2] == "missing"  # alive at the Proxy, no host sample
    assert page.rows["h100-a"][4].startswith("25%") and "2 / 8" in page.rows["h100-a"][4]
    assert page.rows["h100-a"][5] == "12 s"  # idle for
    assert "4 H100" in page.rows["h100-a"][9] and "1 unhealthy" in page.rows["h100-a"][9]
    assert page.rows["h100-d"][9] == "no GPU data"


async def test_an_unhealthy_gpu_has_no_usage_bar(make_bridge: MakeBridge) -> None:
    bridge = await drilled(make_bridge)
    html = await (await bridge.http.get(PAGE)).text()
    gpus = Rows(html, "data-gpu")
    assert gpus.rows["3"][3] == "unhealthy" and "neither used nor free" in gpus.rows["3"][4]
    assert gpus.rows["0"][3:5] == ["healthy", "90%"]


async def test_every_chart_element_is_closed(make_bridge: MakeBridge) -> None:
    # An unquoted attribute ending in "/" (`width=1.5/>`) leaves an SVG element open,
    # and the browser draws none of what follows inside it.
    bridge = await drilled(make_bridge)
    for path in ("/status", PAGE):
        html = await (await bridge.http.get(path)).text()
        closed = Closed(html)
        assert closed.open_shapes == [], path
        assert closed.shapes["polyline"] >= 2 and closed.shapes["rect"] >= 2


class Closed(Elements):
    SHAPES = ("rect", "polyline", "circle", "line")

    def __init__(self, html: str) -> None:
        self.open_shapes: list[str] = []
        self.shapes = dict.fromkeys(self.SHAPES, 0)
        super().__init__(html)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.SHAPES:
            self.shapes[tag] += 1

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        super().handle_starttag(tag, attrs)
        if tag in self.SHAPES:
            self.open_shapes.append(tag)


async def test_the_trend_breaks_at_the_gap_and_hatches_it(make_bridge: MakeBridge) -> None:
    bridge = await drilled(make_bridge)
    page = Elements(await (await bridge.http.get(PAGE)).text())
    lines = [a for tag, a in page.tags if tag == "polyline" and a["data-series"] == "load"]
    gaps = [a for tag, a in page.tags if tag == "rect" and a.get("class") == "gap"]
    assert len(lines) == 2  # before and after the minute without data
    assert [g["data-series"] for g in gaps] == ["load"]
    assert gaps[0]["fill"] == "url(#unknown-hatch)"
    # The gap is drawn where the line is not: no point of either line falls inside it.
    left = float(str(gaps[0]["x"]))
    right = left + float(str(gaps[0]["width"]))
    xs = [float(p.split(",")[0]) for a in lines for p in (a["points"] or "").split()]
    assert not any(left < x < right for x in xs)


# --- the terminal -----------------------------------------------------------------

async def test_the_cli_drills_into_a_pool(make_bridge: MakeBridge) -> None:
    bridge = await drilled(make_bridge)
    code, out, err = await status("--bridge-url", bridge.url, DRILLED)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith(f"poolscope status: pool {DRILLED} at ")
    rows = {line.split()[0]: line.split() for line in lines
            if line.startswith("h100-") and ("alive" in line or "stale" in line)}
    assert {i: r[1] for i, r in rows.items()} == {
        "h100-a": "alive", "h100-b": "alive", "h100-c": "stale", "h100-d": "alive"}
    assert rows["h100-d"][2] == "missing"
    load = next(line for line in lines if line.startswith("load "))
    assert "\u2571" in load and load.endswith("70%")  # the gap hatched, the newest value
    assert all(len(line) <= 120 for line in lines)
    assert any("unhealthy" in line and "not counted" in line for line in lines)


async def test_the_cli_drill_down_as_json(make_bridge: MakeBridge) -> None:
    bridge = await drilled(make_bridge)
    code, out, _ = await status("--bridge-url", bridge.url, "--json", DRILLED)
    assert code == 0
    doc = json.loads(out)
    assert doc["proxy_id"] == DRILLED and doc["pool"]["load_ratio"] == 0.62
    by_id = {i["instance_id"]: i for i in doc["instances"]}
    assert by_id["h100-c"]["liveness"] == "stale" and by_id["h100-d"]["resource"] == "missing"
    assert by_id["h100-d"]["cpu_ratio"] is None and by_id["h100-d"]["gpus"] is None
    assert by_id["h100-a"]["gpu_models"] == [{"model": "H100", "healthy": 3, "unhealthy": 1}]
    assert doc["trend"]["load_ratio"][-1] == pytest.approx(0.7)


async def test_the_cli_refuses_an_unknown_pool_in_one_line(make_bridge: MakeBridge) -> None:
    bridge = await drilled(make_bridge)
    code, out, err = await status("--bridge-url", bridge.url, "nobody")
    assert (code, out) == (1, "")
    assert err.count("\n") == 1 and "404" in err and "unknown proxy_id" in err


async def test_the_cli_refuses_a_hostile_pool_id_at_start() -> None:
    code, out, err = await status('a"}or vector(1)')
    assert (code, out) == (2, "")
    assert "POOL" in err or "pool" in err
