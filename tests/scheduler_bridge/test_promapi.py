"""Parsing Prometheus' answer: every malformed shape fails on its own backend, so the
next backend is asked, and values keep NaN for the summary to turn into null."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from poolscope.bridge.promapi import MAX_LAYOUTS, AllBackendsFailed, ErrorKind, PrometheusAPI
from tests.scheduler_bridge.conftest import Serve

GOOD = {"status": "success", "data": {"resultType": "vector", "result": [
    {"metric": {"__name__": "proxy_pool:instances:count", "proxy_id": "a"},
     "value": [1.5, "3"]},
    {"metric": {"__name__": "proxy_pool:cpu_utilization:avg", "proxy_id": "a"},
     "value": [1.5, "NaN"]},
    {"metric": {"__name__": "proxy_pool:cpu_utilization:max", "proxy_id": "a"},
     "value": [1.5, "+Inf"]}]}}


def _with_result(result: object) -> bytes:
    return orjson.dumps({"status": "success", "data": {"resultType": "vector",
                                                       "result": result}})




async def test_values_are_parsed_and_non_finite_ones_read_as_none(serve: Serve) -> None:
    url = await serve(orjson.dumps(GOOD), 200)
    async with aiohttp.ClientSession() as session:
        result = await PrometheusAPI([url], session, 2.0).query("x", 1.5)
    assert result.backend == url
    vector = result.samples
    assert vector.values[0] == 3.0
    assert math.isnan(vector.values[1]) and vector.values[2] == math.inf
    assert [value for _, value in vector] == [3.0, None, None]
    assert vector[0] == ({"__name__": "proxy_pool:instances:count", "proxy_id": "a"}, 3.0)


@pytest.mark.parametrize(("body", "status", "kind"), [
    (b"<html>bad gateway</html>", 502, ErrorKind.HTTP),
    (b"{not json", 200, ErrorKind.RESPONSE),
    (b'{"status":"error","errorType":"bad_data","error":"parse error"}', 400, ErrorKind.API),
    (b'{"status":"success","data":{"resultType":"matrix","result":[]}}', 200,
     ErrorKind.RESPONSE),
    (_with_result([{"value": [1, "1"]}]), 200, ErrorKind.RESPONSE),  # no metric
    (_with_result([{"metric": {}, "value": [1]}]), 200, ErrorKind.RESPONSE),  # no value
    (_with_result([{"metric": {}, "value": [1, "one"]}]), 200, ErrorKind.RESPONSE),
    (_with_result([{"metric": {}, "value": [1, None]}]), 200, ErrorKind.RESPONSE),
    (_with_result([{"metric": ["a"], "value": [1, "1"]}]), 200, ErrorKind.RESPONSE),
    (_with_result({"metric": {}}), 200, ErrorKind.RESPONSE),  # not a list
])
async def test_a_malformed_answer_fails_its_backend_and_the_next_one_answers(
        serve: Serve, body: bytes, status: int, kind: str) -> None:
    bad = await serve(body, status)
    good = await serve(orjson.dumps(GOOD), 200)
    async with aiohttp.ClientSession() as session:
        with pytest.raises(AllBackendsFailed) as failed:
            await PrometheusAPI([bad], session, 2.0).query("x", 1.5)
        fallback = await PrometheusAPI([bad, good], session, 2.0).query("x", 1.5)
    assert [e.kind for e in failed.value.errors] == [kind]
    assert failed.value.errors[0].backend == bad
    assert fallback.backend == good
    assert len(fallback.samples) == 3


def _answer(rows: list[tuple[dict[str, str], str]], at: float) -> bytes:
    return _with_result([{"metric": m, "value": [at, v]} for m, v in rows])


def _pools(n: int, value: str, source: str = "psutil") -> list[tuple[dict[str, str], str]]:
    return [({"__name__": "proxy_pool:cpu_utilization:avg", "proxy_id": f"p{i}",
              "source": source}, value) for i in range(n)]


@dataclass
class Answer:
    body: bytes = b""
    status: int = 200


@pytest.fixture
async def changing() -> AsyncIterator[tuple[Answer, str]]:
    """A backend answering every query with what its Answer holds at that moment."""
    answer = Answer()

    async def query(request: web.Request) -> web.Response:
        return web.Response(body=answer.body, status=answer.status,
                            content_type="application/json")

    app = web.Application()
    app.router.add_get("/api/v1/query", query)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield answer, str(server.make_url("")).rstrip("/")
    await server.close()


async def test_a_repeated_query_reads_only_the_values_and_reads_them_right(
        changing: tuple[Answer, str]) -> None:
    answer, url = changing
    async with aiohttp.ClientSession() as session:
        api = PrometheusAPI([url], session, 2.0)
        answer.body = _answer(_pools(150, "1"), 1.5)
        first = (await api.query("x", 1.5)).samples
        answer.body = _answer(_pools(150, "0.5"), 2.5)
        second = (await api.query("x", 2.5)).samples
        answer.body = _answer(_pools(150, "NaN"), 3.5)
        third = (await api.query("x", 3.5)).samples
        answer.body = _answer(_pools(150, "2", source="nvml"), 4.5)
        changed = (await api.query("x", 4.5)).samples
    assert third.labels is second.labels  # the label sets of the layout, not parsed again
    assert list(second.labels) == list(first.labels)
    assert list(second.values) == [0.5] * 150
    assert all(math.isnan(v) for v in third.values)
    assert changed.labels is not second.labels
    assert [m["source"] for m in changed.labels] == ["nvml"] * 150
    assert list(changed.values) == [2.0] * 150


async def test_a_failed_answer_keeps_the_layout_and_a_bad_value_is_still_refused(
        changing: tuple[Answer, str]) -> None:
    answer, url = changing
    async with aiohttp.ClientSession() as session:
        api = PrometheusAPI([url], session, 2.0)
        for at in (1.5, 2.5):
            answer.body = _answer(_pools(150, "1"), at)
            kept = (await api.query("x", at)).samples
        answer.body, answer.status = b'{"status":"error","error":"busy"}', 503
        with pytest.raises(AllBackendsFailed):
            await api.query("x", 3.5)
        answer.body, answer.status = _answer(_pools(150, "3"), 4.5), 200
        after = (await api.query("x", 4.5)).samples
        answer.body = _answer(_pools(150, "one"), 5.5)
        with pytest.raises(AllBackendsFailed) as bad:
            await api.query("x", 5.5)
    assert after.labels is kept.labels
    assert list(after.values) == [3.0] * 150
    assert [e.kind for e in bad.value.errors] == [ErrorKind.RESPONSE]


async def test_the_layouts_kept_are_capped_however_many_queries_were_asked(
        changing: tuple[Answer, str]) -> None:
    """Each pool's own query (the drill-down's, the Proxy bridge's) keeps a layout: pools
    come and go, and only the MAX_LAYOUTS last asked are kept."""
    answer, url = changing
    answer.body = _answer(_pools(150, "1"), 1.5)
    async with aiohttp.ClientSession() as session:
        api = PrometheusAPI([url], session, 2.0)
        for i in range(4 * MAX_LAYOUTS):
            await api.query(f'x{{proxy_id="pool-{i}"}}', 1.5)
    assert len(api._layouts) == MAX_LAYOUTS
