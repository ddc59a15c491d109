"""A canned Prometheus: /api/v1/query answers with vectors the test sets, written as
compactly as Prometheus writes them, and records every query, evaluation time and
Accept-Encoding it was asked with, so tests can assert on what the bridge sent as well
as on what it served. /api/v1/query_range answers from `matrix`, each selected series'
points within the range as given (on the grid or off it, aggregations not applied), and
records its queries apart, in `range_queries`.

Its clock is the time it is asked about (its `Date` header says so) moved by `skew_s`,
and its rules wrote every rollup `rollups_age_s` before that time, or, where a test
plays the rules' evaluations by hand, at `rollups_written_at`: the bridge's question
for the rollups' timestamps is answered from those, asked of data_quality or of the
fleet series the rules write after it (none when `fleet_series` is off: rules from
before it)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any, NamedTuple

import orjson
from aiohttp import web
from aiohttp.test_utils import TestServer

from harness.rollup_target import Series, series
from poolscope.bridge.queries import EVALUATED_QUERY, FLEET_EVALUATED_QUERY
from poolscope.contract.fields import DATA_QUALITY_LABEL, DATA_QUALITY_ROLLUP, FIELDS, Kind

__all__ = ["CannedPrometheus", "RangeQuery", "RangeSeries", "Series", "pool_series", "series"]

# One range series: its labels (`__name__` included) and its (time, Prometheus' string
# form of the value) points.
RangeSeries = tuple[dict[str, str], list[tuple[float, str]]]


class RangeQuery(NamedTuple):
    promql: str
    start: str
    end: str
    step: str
    nocache: str | None


def pool_series(proxy_id: str, value: str = "1", source: str = "test",
                state: str = "accepting", quality: str = "complete") -> list[Series]:
    """Every rollup of one pool, each holding `value`: what complete rules produce."""
    out = [series(f.rollup, proxy_id, "1" if f.kind is Kind.STATE else value, source,
                  **({f.state_label: state} if f.kind is Kind.STATE else f.matchers))
           for f in FIELDS]
    out.append(series(DATA_QUALITY_ROLLUP, proxy_id, "1", source,
                      **{DATA_QUALITY_LABEL: quality}))
    return out


_MATCHER = re.compile(r'(\w+)(=~|!~|!=|=)"([^"]*)"')


def _selects(promql: str, metric: dict[str, str]) -> bool:
    """Label matchers of a plain selector, as Prometheus applies them (anchored regex)."""
    for label, op, operand in _MATCHER.findall(promql):
        value = metric.get(label, "")
        hit = (re.fullmatch(operand, value) is not None if op in ("=~", "!~")
               else value == operand)
        if hit != (op in ("=~", "=")):
            return False
    return True


def _names(promql: str, metric: dict[str, str]) -> bool:
    """Whether the query names the series' metric (a range query's selectors do)."""
    name = re.escape(metric.get("__name__", ""))
    return re.search(rf"(?<![\w:]){name}(?![\w:])", promql) is not None


@dataclass
class CannedPrometheus:
    vector: list[Series] = field(default_factory=list)
    queries: list[tuple[str, str]] = field(default_factory=list)  # (promql, time)
    accept_encodings: list[str | None] = field(default_factory=list)  # per query
    nocache: list[str | None] = field(default_factory=list)  # per query
    fail_status: int | None = None  # answer every query with this API error
    fail_matching: str | None = None  # ... or only queries containing this text
    gate: asyncio.Event | None = None  # hold answers until set
    skew_s: float = 0.0  # how far this Prometheus' clock is ahead of the time asked
    rollups_age_s: float = 0.0  # how long before the time asked the rules last ran
    rollups_written_at: float | None = None  # ... or when they last ran, as a timestamp
    fleet_series: bool = True  # the rules write fleet:proxy_pools:count beside the rollups
    matrix: list[RangeSeries] = field(default_factory=list)  # what range queries select from
    range_queries: list[RangeQuery] = field(default_factory=list)
    # Dates every answer, as a real Prometheus' clock; None: the time asked (a range's end).
    clock: Callable[[], float] | None = None
    server: TestServer | None = None

    @property
    def rollup_queries(self) -> list[tuple[str, str]]:
        """The queries for rollups, without the one for their timestamps."""
        return [(q, at) for q, at in self.queries
                if q not in (EVALUATED_QUERY, FLEET_EVALUATED_QUERY)]

    @property
    def url(self) -> str:
        assert self.server is not None
        return str(self.server.make_url("")).rstrip("/")

    async def start(self) -> CannedPrometheus:
        app = web.Application()
        app.router.add_route("*", "/api/v1/query", self._query)
        app.router.add_route("*", "/api/v1/query_range", self._query_range)
        self.server = TestServer(app, host="127.0.0.1")
        await self.server.start_server()
        return self

    async def close(self) -> None:
        if self.server is not None:
            await self.server.close()

    async def _query(self, request: web.Request) -> web.Response:
        params = request.query if request.method == "GET" else await request.post()
        promql, at = str(params.get("query", "")), str(params.get("time", ""))
        self.queries.append((promql, at))
        self.accept_encodings.append(request.headers.get("Accept-Encoding"))
        self.nocache.append(params.get("nocache"))
        failed = await self._held_or_failed(promql)
        if failed is not None:
            return failed
        result: list[dict[str, Any]] = [
            {"metric": metric, "value": [float(at), value]} for metric, value in self.vector
            if _selects(promql, metric)]
        if promql == FLEET_EVALUATED_QUERY and not self.fleet_series:
            result = []
        if promql.startswith("max(timestamp("):
            written = (float(at) - self.rollups_age_s if self.rollups_written_at is None
                       else self.rollups_written_at)
            result = [{"metric": {}, "value": [float(at), f"{written:.3f}"]}][:len(result)]
        return self.answer(at, result)

    async def _query_range(self, request: web.Request) -> web.Response:
        params = request.query if request.method == "GET" else await request.post()
        promql = str(params.get("query", ""))
        start, end = str(params.get("start", "")), str(params.get("end", ""))
        self.range_queries.append(RangeQuery(promql, start, end, str(params.get("step", "")),
                                             params.get("nocache")))
        failed = await self._held_or_failed(promql)
        if failed is not None:
            return failed
        selected = [(metric, [[t, v] for t, v in points if float(start) <= t <= float(end)])
                    for metric, points in self.matrix
                    if _names(promql, metric) and _selects(promql, metric)]
        result = [{"metric": metric, "values": values} for metric, values in selected if values]
        dated = float(end) if self.clock is None else self.clock()
        return self._answer("matrix", result, dated)

    async def _held_or_failed(self, promql: str) -> web.Response | None:
        """Waits for the gate; the canned failure, when this query is to fail."""
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_status is not None or (self.fail_matching or "\0") in promql:
            return web.json_response(
                {"status": "error", "errorType": "internal", "error": "canned failure"},
                status=self.fail_status or 500)
        return None

    def answer(self, at: str, result: list[dict[str, Any]]) -> web.Response:
        """A vector answer to a query about `at`, dated by this Prometheus' clock."""
        return self._answer("vector", result, float(at) if self.clock is None else self.clock())

    def _answer(self, result_type: str, result: list[dict[str, Any]],
                dated: float) -> web.Response:
        body = orjson.dumps(
            {"status": "success", "data": {"resultType": result_type, "result": result}})
        return web.Response(body=body, content_type="application/json",
                            headers={"Date": formatdate(dated + self.skew_s, usegmt=True)})
