"""Hostile requests against the Scheduler bridge's aiohttp app, in this process,
over a canned Prometheus that records every query it is sent.

Every request gets a clear answer — 200 for a known pool, 404 for an unknown one,
400 for an id outside the allowed alphabet, 4xx for malformed HTTP — never a 500,
and nothing a client sends ever reaches the PromQL: the bridge only ever asks the
fixed snapshot query.
"""

from __future__ import annotations

import http.client
import json
import socket
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from aiohttp.test_utils import TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from harness.canned_prometheus import CannedPrometheus, pool_series
from poolscope.bridge.app import Settings
from poolscope.bridge.queries import FLEET_EVALUATED_QUERY, snapshot_queries
from poolscope.scheduler_bridge.app import create_app
from poolscope.service.identity import valid_id
from tests.reliability.stack import ThreadedLoop

ROUTES = ("/debug/proxy_pool_resources", "/debug/pool_resource_sources", "/healthz", "/readyz",
          "/metrics", "/v1/pool_resources/pool-1")
HOSTILE = ['"', "'", "}", "{", '"}', '=~".*"', '",x=~".+', "\n", "\r\n", "\\", "pool-1\n",
           "pool-1\"} or vector(1) #", "ünïcødé", "\U0001d52d\U0001d52c\U0001d52c\U0001d529",
           "\x00", "%", "..", "a" * 129, "pool-1 or up", "proxy_pool:x", "*", "$(reboot)"]
FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


@dataclass
class Bridge:
    host: str
    port: int
    canned: CannedPrometheus

    def get(self, raw_path: str) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            conn.request("GET", raw_path)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def sent_promql(self) -> set[str]:
        return {q for q, _ in self.canned.queries}


@pytest.fixture(scope="module")
def bridge() -> Iterator[Bridge]:
    loop = ThreadedLoop()

    async def start() -> tuple[CannedPrometheus, TestServer]:
        canned = await CannedPrometheus(vector=pool_series("pool-1")).start()
        # A long TTL: one refresh serves the whole module, so every query the
        # canned Prometheus records was made by the bridge on its own.
        app = create_app(Settings(backends=(canned.url,), cache_ttl_s=3600.0,
                                  stale_after_s=7200.0), registry=CollectorRegistry())
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        return canned, server

    canned, server = loop.run(start())
    assert server.port is not None
    bridge = Bridge("127.0.0.1", server.port, canned)
    assert bridge.get("/debug/proxy_pool_resources")[0] == 200
    assert bridge.sent_promql() == {FLEET_EVALUATED_QUERY, *snapshot_queries(1)}  # the one refresh
    yield bridge
    loop.run(server.close())
    loop.run(canned.close())
    loop.close()


def quote(text: str) -> str:
    return urllib.parse.quote(text, safe="")


def assert_never_in_promql(bridge: Bridge, text: str) -> None:
    fixed = {FLEET_EVALUATED_QUERY, *snapshot_queries(1)}
    assert bridge.sent_promql() == fixed, bridge.sent_promql()
    if text and not any(text in q for q in fixed):
        assert all(text not in q for q in bridge.sent_promql())


@FUZZ
@given(st.one_of(st.sampled_from(HOSTILE), st.text(min_size=1, max_size=200)))
def test_any_proxy_id_is_200_404_or_400_and_never_reaches_promql(bridge: Bridge,
                                                                 proxy_id: str) -> None:
    status, body = bridge.get(f"/v1/pool_resources/{quote(proxy_id)}")
    if "/" in proxy_id or proxy_id in (".", ".."):
        assert 400 <= status < 500  # another route, or none: still a client error
    elif not valid_id(proxy_id):
        assert status == 400 and "invalid proxy_id" in json.loads(body)["error"]
    else:
        assert status == (200 if proxy_id == "pool-1" else 404), (status, body)
    assert_never_in_promql(bridge, proxy_id)


@FUZZ
@given(st.sampled_from(ROUTES),
       st.lists(st.tuples(st.one_of(st.sampled_from(["query", "time", "detail", "proxy_id",
                                                     "match[]"]), st.text(max_size=20)),
                          st.one_of(st.sampled_from(HOSTILE), st.text(max_size=100))),
                max_size=4))
def test_query_parameters_on_every_route_are_ignored_not_obeyed(
        bridge: Bridge, route: str, params: list[tuple[str, str]]) -> None:
    query = "&".join(f"{quote(k)}={quote(v)}" for k, v in params)
    status, _ = bridge.get(f"{route}?{query}")
    assert status == 200
    for _, v in params:
        assert_never_in_promql(bridge, v)


@pytest.mark.parametrize("raw", [
    "/v1/pool_resources/" + "a" * 1_000_000,
    "/debug/proxy_pool_resources?x=" + "%22" * 300_000,
    "/v1/pool_resources/" + quote("é" * 100_000),
], ids=["megabyte-id", "megabyte-quotes", "unicode-100k"])
def test_megabyte_request_lines_get_a_client_error(bridge: Bridge, raw: str) -> None:
    status, _ = bridge.get(raw)
    assert 400 <= status < 500
    assert bridge.get("/healthz")[0] == 200  # and the bridge carries on


@pytest.mark.parametrize("request_bytes", [
    b'GET /v1/pool_resources/pool-1"}\r\nX: y HTTP/1.1\r\n\r\n',
    b"GET /v1/pool_resources/pool-1\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-Big: " + b"a" * 100_000 + b"\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(500)) + b"\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64,  # a TLS hello
], ids=["quote-brace-in-path", "newline-in-request-line", "100k-header", "500-headers", "tls"])
def test_malformed_http_gets_a_client_error(bridge: Bridge, request_bytes: bytes) -> None:
    with socket.create_connection((bridge.host, bridge.port), timeout=10) as s:
        s.sendall(request_bytes)
        head = s.recv(65536).split(b"\r\n", 1)[0]
    status = int(head.split()[1])
    assert 400 <= status < 500, head
    assert_never_in_promql(bridge, '"}')
