"""Trends: range queries placed into one slot per step, unknown kept apart from zero,
windows aligned so that readers in one step share one question and one answer."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from harness.canned_prometheus import CannedPrometheus
from harness.polling import until
from poolscope.bridge.promapi import (
    AllBackendsFailed,
    BackendError,
    ErrorKind,
    PrometheusAPI,
    RangeResult,
)
from poolscope.bridge.trends import (
    LOAD_RATIO_ROLLUP,
    MAX_KEPT,
    SATURATION_ROLLUP,
    TREND_POINTS,
    TREND_STEP_S,
    TREND_WINDOW_S,
    Trend,
    TrendReader,
    Trends,
    read_trends,
)
from tests.scheduler_bridge.conftest import FakeClock, Serve

# FakeClock's start, on the grid: the window is END - 900 .. END.
END = 1_699_999_995.0
START = END - TREND_WINDOW_S
NONE = (None,) * TREND_POINTS



def load(pool: str, *points: tuple[float, str], **labels: str
         ) -> tuple[dict[str, str], list[tuple[float, str]]]:
    return {"__name__": LOAD_RATIO_ROLLUP, "proxy_id": pool, **labels}, list(points)


def saturation(pool: str, *points: tuple[float, str]
               ) -> tuple[dict[str, str], list[tuple[float, str]]]:
    return {"__name__": SATURATION_ROLLUP, "proxy_id": pool}, list(points)


def slots(**at: float) -> tuple[float | None, ...]:
    """All None but the slots named `s<index>`."""
    values: list[float | None] = list(NONE)
    for name, value in at.items():
        values[int(name.removeprefix("s"))] = value
    return tuple(values)


@pytest.fixture
async def api(canned: CannedPrometheus, clock: FakeClock) -> AsyncIterator[PrometheusAPI]:
    """Over the canned Prometheus, whose range answers are dated by the same clock."""
    canned.clock = clock
    async with aiohttp.ClientSession() as session:
        yield PrometheusAPI([canned.url], session, 2.0, clock=clock)




async def test_points_land_in_their_slots_and_the_rest_are_unknown(
        canned: CannedPrometheus, api: PrometheusAPI, clock: FakeClock) -> None:
    canned.matrix = [
        load("a", (START, "0.1"), (START + 3 * 15 + 4, "0.4"), (START + 5 * 15 - 6, "0.5"),
             (END, "0.9")),
        saturation("a", (START + 15, "NaN"), (START + 30, "+Inf"), (START + 45, "-Inf"),
                   (START + 60, "0.2")),
        load("b", (END - 15, "0")),
    ]
    trends = await read_trends(api, clock())
    assert (trends.start, trends.end, trends.step_s) == (START, END, TREND_STEP_S)
    assert sorted(trends.pools) == ["a", "b"]
    a, b = trends.pools["a"], trends.pools["b"]
    assert a.load_ratio == slots(s0=0.1, s3=0.4, s5=0.5, s60=0.9)  # off the grid: rounded
    assert a.saturation == slots(s4=0.2)  # NaN and infinities are no measurement
    assert b.load_ratio == slots(s59=0.0)  # a measured zero stays one
    assert b.saturation == NONE  # in one series only: unknown in the other
    assert len(a.load_ratio) == 61 == TREND_WINDOW_S / TREND_STEP_S + 1


async def test_one_series_per_pool_is_asked_for_and_the_busier_duplicate_counts(
        canned: CannedPrometheus, api: PrometheusAPI, clock: FakeClock) -> None:
    canned.matrix = [load("a", (START, "0.2"), (END, "0.7"), source="proxy_dispatch"),
                     load("a", (START, "0.6"), (END, "0.3"), source="engine"),
                     load("b", (START, "1")),
                     saturation("a", (END, "0.5"))]
    fleet = await read_trends(api, clock())
    one = await read_trends(api, clock(), "a")
    hostile = await read_trends(api, clock(), 'a",__name__=~".+')
    assert sorted(q.promql for q in canned.range_queries) == sorted([
        f"max by (proxy_id) (max_over_time({LOAD_RATIO_ROLLUP}[15s]))",
        f"max by (proxy_id) (max_over_time({SATURATION_ROLLUP}[15s]))",
        f'max by (proxy_id) (max_over_time({LOAD_RATIO_ROLLUP}{{proxy_id="a"}}[15s]))',
        f'max by (proxy_id) (max_over_time({SATURATION_ROLLUP}{{proxy_id="a"}}[15s]))',
        f'max by (proxy_id) (max_over_time({LOAD_RATIO_ROLLUP}'
        f'{{proxy_id="a\\",__name__=~\\".+"}}[15s]))',
        f'max by (proxy_id) (max_over_time({SATURATION_ROLLUP}'
        f'{{proxy_id="a\\",__name__=~\\".+"}}[15s]))'])
    assert fleet.pools["a"].load_ratio == slots(s0=0.6, s60=0.7)  # should two arrive anyway
    assert sorted(one.pools) == ["a"]
    assert one.pools["a"] == fleet.pools["a"]
    assert hostile.pools == {}


async def test_every_reader_in_one_step_asks_the_same_window(
        canned: CannedPrometheus, api: PrometheusAPI) -> None:
    for at in (END, END + 0.1, END + 14.999, END + 15):
        await read_trends(api, at)
    asked = {(q.start, q.end, q.step, q.nocache) for q in canned.range_queries}
    assert asked == {(f"{START:.3f}", f"{END:.3f}", "15.000", "1"),
                     (f"{START + 15:.3f}", f"{END + 15:.3f}", "15.000", "1")}
    assert len(canned.range_queries) == 8


async def test_a_failed_series_fails_the_whole_read(
        canned: CannedPrometheus, api: PrometheusAPI, clock: FakeClock) -> None:
    canned.matrix = [load("a", (END, "0.5"))]
    canned.fail_matching = SATURATION_ROLLUP
    with pytest.raises(AllBackendsFailed) as failed:
        await read_trends(api, clock())
    assert [e.kind for e in failed.value.errors] == [ErrorKind.API]


async def test_trends_round_trip_through_json(
        canned: CannedPrometheus, api: PrometheusAPI, clock: FakeClock) -> None:
    canned.matrix = [load("a", (START, "0.25"), (END, "1.5")), saturation("b", (END, "0"))]
    trends = await read_trends(api, clock())
    doc = json.loads(json.dumps(trends.as_dict(), allow_nan=False))
    assert doc["window_s"] == TREND_WINDOW_S and doc["step_s"] == TREND_STEP_S
    assert doc["pools"]["a"]["load_ratio"][:2] == [0.25, None]
    assert doc["pools"]["b"]["load_ratio"] == [None] * TREND_POINTS
    assert Trends.from_dict(doc) == trends


def _doc(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = Trends(START, END, TREND_STEP_S, {
        "a": Trend(slots(s0=0.5), NONE)}).as_dict()
    pool = doc["pools"]["a"]
    for key, value in changes.items():
        if key in pool:
            pool[key] = value
        else:
            doc[key] = value
    return doc


def _without(key: str) -> dict[str, Any]:
    doc = _doc()
    if key in doc:
        del doc[key]
    else:
        del doc["pools"]["a"][key]
    return doc


@pytest.mark.parametrize("doc", [
    [], "trends", _without("start"), _without("step_s"), _without("pools"),
    _without("saturation"), _doc(start="0"), _doc(end=True), _doc(start=math.nan),
    _doc(step_s=0), _doc(step_s=-15.0), _doc(step_s=7.0), _doc(window_s=600.0),
    _doc(pools=[]), _doc(pools={"a": [0.5]}), _doc(load_ratio=[0.5] * 60),
    _doc(load_ratio=[0.5] * 62), _doc(load_ratio="0.5"), _doc(saturation=["0.5"] * 61),
    _doc(saturation=[True] * 61), _doc(saturation=[math.inf] * 61),
    _doc(saturation=[{"v": 1}] * 61)])
def test_a_malformed_document_is_refused(doc: Any) -> None:
    with pytest.raises(ValueError, match="trends"):
        Trends.from_dict(doc)


def test_the_unbroken_document_is_accepted() -> None:
    """So each refusal above is its fault's, not the document builder's."""
    assert Trends.from_dict(_doc()).pools["a"].load_ratio == slots(s0=0.5)
    assert Trends.from_dict(_doc(extra="ignored", saturation=[1] * 61)).pools["a"].saturation \
        == (1.0,) * TREND_POINTS


def _answer(result_type: str, result: object) -> bytes:
    return orjson.dumps({"status": "success",
                         "data": {"resultType": result_type, "result": result}})


class Observed:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None]] = []

    def observe_query(self, backend: str, seconds: float, error: BackendError | None) -> None:
        self.calls.append((backend, None if error is None else error.kind))


@pytest.mark.parametrize(("body", "status", "kind"), [
    (_answer("vector", [{"metric": {}, "value": [1, "1"]}]), 200, ErrorKind.RESPONSE),
    (b"<html>internal error</html>", 500, ErrorKind.HTTP),
    (b"{not json", 200, ErrorKind.RESPONSE),
    (b'{"status":"error","errorType":"bad_data","error":"parse error"}', 400, ErrorKind.API),
    (_answer("matrix", [{"metric": {}, "values": [[1, "one"]]}]), 200, ErrorKind.RESPONSE),
    (_answer("matrix", [{"metric": {}, "values": [[1]]}]), 200, ErrorKind.RESPONSE),
    (_answer("matrix", [{"metric": {}, "values": [[1, None]]}]), 200, ErrorKind.RESPONSE),
    (_answer("matrix", [{"metric": {}}]), 200, ErrorKind.RESPONSE),  # no values
    (_answer("matrix", [{"metric": ["a"], "values": []}]), 200, ErrorKind.RESPONSE),
    (_answer("matrix", {"metric": {}}), 200, ErrorKind.RESPONSE),  # not a list
])
async def test_a_bad_range_answer_fails_its_backend_and_the_next_one_answers(
        serve: Serve, canned: CannedPrometheus, body: bytes, status: int, kind: str) -> None:
    bad = await serve(body, status)
    with_password = bad.replace("http://", "http://user:secret@")
    canned.clock = time.time  # as the backends' own Date headers are
    canned.matrix = [load("a", (10.0, "0.5"), (25.0, "0.75"))]
    observed = Observed()
    async with aiohttp.ClientSession() as session:
        with pytest.raises(AllBackendsFailed) as failed:
            await PrometheusAPI([bad], session, 2.0).query_range("x", 10, 25, 15)
        fallback = await PrometheusAPI([with_password, canned.url], session, 2.0, observed
                                       ).query_range(LOAD_RATIO_ROLLUP, 10, 25, 15)
    assert [(e.backend, e.kind) for e in failed.value.errors] == [(bad, kind)]
    assert fallback == RangeResult(
        (({"__name__": LOAD_RATIO_ROLLUP, "proxy_id": "a"}, ((10.0, 0.5), (25.0, 0.75))),),
        canned.url)
    assert observed.calls == [(bad, kind), (canned.url, None)]  # named without the password


async def test_a_range_answer_keeps_the_bounds_and_the_clock_check(
        canned: CannedPrometheus, clock: FakeClock) -> None:
    canned.clock = clock
    async with aiohttp.ClientSession() as session:
        small = PrometheusAPI([canned.url], session, 2.0, clock=clock, max_answer_bytes=40)
        canned.matrix = [load("a", (END, "0.5"))]
        with pytest.raises(AllBackendsFailed) as large:
            await small.query_range(LOAD_RATIO_ROLLUP, START, END, TREND_STEP_S)
        canned.skew_s = 60.0
        with pytest.raises(AllBackendsFailed) as skewed:
            await PrometheusAPI([canned.url], session, 2.0, clock=clock).query_range(
                LOAD_RATIO_ROLLUP, START, END, TREND_STEP_S)
    assert [e.kind for e in large.value.errors] == [ErrorKind.TOO_LARGE]
    assert [e.kind for e in skewed.value.errors] == [ErrorKind.CLOCK]


async def test_readers_in_flight_share_one_read(
        canned: CannedPrometheus, api: PrometheusAPI, clock: FakeClock) -> None:
    canned.matrix = [load("a", (END, "0.5"))]
    canned.gate = asyncio.Event()
    reader = TrendReader(api)
    first = asyncio.ensure_future(reader.read(clock()))
    second = asyncio.ensure_future(reader.read(clock() + 1))
    gives_up = asyncio.ensure_future(reader.read(clock() + 2))
    await until(lambda: len(canned.range_queries), lambda n: n >= 2, "the first read asks")
    gives_up.cancel()
    canned.gate.set()
    one, other = await asyncio.gather(first, second)
    assert one is other
    assert one.pools["a"].load_ratio == slots(s60=0.5)
    assert len(canned.range_queries) == 2  # one pair, however many wait on it
    assert gives_up.cancelled()


async def test_a_read_is_kept_for_its_step_and_key(
        canned: CannedPrometheus, api: PrometheusAPI, clock: FakeClock) -> None:
    canned.matrix = [load("a", (END, "0.5"))]
    reader = TrendReader(api)
    clock.now = END + 1.0
    kept = await reader.read(clock())
    clock.now += 13.0
    assert await reader.read(clock()) is kept
    assert len(canned.range_queries) == 2
    clock.now += 1.0  # the next step
    moved = await reader.read(clock())
    assert (moved.end, len(canned.range_queries)) == (END + 15, 4)
    assert await reader.read(clock() - 15.0) is moved  # a lagging caller gets the newer
    assert await reader.read(clock()) is moved
    one = await reader.read(clock(), "a")
    assert sorted(one.pools) == ["a"] and len(canned.range_queries) == 6


async def test_a_failed_read_is_kept_for_its_step_only(
        canned: CannedPrometheus, api: PrometheusAPI, clock: FakeClock) -> None:
    reader = TrendReader(api)
    canned.fail_status = 503
    with pytest.raises(AllBackendsFailed):
        await reader.read(clock())
    canned.fail_status = None
    canned.matrix = [load("a", (END, "0.5")), load("a", (END + 15, "0.6"))]
    with pytest.raises(AllBackendsFailed):  # the same step: the failure, not a new wait
        await reader.read(clock() + 1.0)
    assert len(canned.range_queries) == 2
    clock.now += TREND_STEP_S
    trends = await reader.read(clock())
    assert trends.pools["a"].load_ratio[-1] == 0.6
    assert len(canned.range_queries) == 4


async def test_close_cancels_the_reads_still_asking(
        canned: CannedPrometheus, api: PrometheusAPI, clock: FakeClock) -> None:
    canned.gate = asyncio.Event()
    reader = TrendReader(api)
    waiting = asyncio.ensure_future(reader.read(clock()))
    await until(lambda: len(canned.range_queries), lambda n: n >= 2, "the read asks")
    reader.close()
    with pytest.raises(asyncio.CancelledError):
        await waiting


async def test_the_oldest_key_is_dropped_past_the_bound(
        canned: CannedPrometheus, api: PrometheusAPI, clock: FakeClock) -> None:
    reader = TrendReader(api)
    for i in range(MAX_KEPT + 1):
        await reader.read(clock(), f"pool-{i}")
    asked = len(canned.range_queries)
    await reader.read(clock(), f"pool-{MAX_KEPT}")
    assert len(canned.range_queries) == asked  # kept
    await reader.read(clock(), "pool-0")
    assert len(canned.range_queries) == asked + 2  # dropped, read again
