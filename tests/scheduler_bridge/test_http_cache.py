"""HTTP caching on the Scheduler bridge: one body per snapshot, its ETag and 304, gzip,
and how long a client may keep it; and the typed client that uses all of it.

The canned Prometheus plays the rules' evaluations by hand (`rollups_written_at`) and
the clock is moved by hand, so that a snapshot changes, ages and turns stale exactly
when a test says."""

from __future__ import annotations

import gzip
import re
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson
import pytest
from multidict import CIMultiDictProxy

from harness.canned_prometheus import CannedPrometheus, pool_series
from poolscope.bridge import http_cache
from poolscope.bridge.http_cache import accepts_gzip
from poolscope.scheduler_bridge import app as scheduler_app
from poolscope.scheduler_bridge.client import SchedulerBridgeClient
from tests.scheduler_bridge.conftest import Bridge, FakeClock, MakeBridge

POOLS = "/debug/proxy_pool_resources"
ONE = "/v1/pool_resources/a"
SOURCES = "/debug/pool_resource_sources"
INTERVAL_S = 5.0
ANSWERS = "poolscope_scheduler_bridge_request_duration_seconds_count"


async def aligned(make_bridge: MakeBridge, canned: CannedPrometheus, clock: FakeClock,
                  **settings: float) -> Bridge:
    """A bridge over rollups the rules wrote just now, every evaluation INTERVAL_S."""
    canned.vector = pool_series("a")
    canned.rollups_written_at = clock.now
    settings.setdefault("fresh_for_s", 15.0)
    return await make_bridge(canned.url, cache_ttl_s=1.0, evaluation_interval_s=INTERVAL_S,
                             **settings)


def evaluate(canned: CannedPrometheus, clock: FakeClock, value: str) -> None:
    """The rules run again, one interval later, and write `value` everywhere."""
    clock.now += INTERVAL_S
    canned.rollups_written_at = clock.now
    canned.vector = pool_series("a", value=value)


async def fetch(bridge: Bridge, path: str, status: int = 200,
                **headers: str) -> tuple[CIMultiDictProxy[str], bytes]:
    resp = await bridge.http.get(path, headers={k.replace("_", "-"): v
                                                for k, v in headers.items()})
    assert resp.status == status, await resp.text()
    return resp.headers, await resp.read()


def max_age(headers: CIMultiDictProxy[str]) -> int:
    found = re.fullmatch(r"max-age=(\d+)", headers["Cache-Control"])
    assert found is not None, headers["Cache-Control"]
    return int(found.group(1))


@pytest.mark.parametrize("path", [POOLS, ONE, SOURCES])
async def test_304_for_the_same_snapshot_then_a_new_etag_when_it_changes(
        path: str, canned: CannedPrometheus, make_bridge: MakeBridge,
        clock: FakeClock) -> None:
    bridge = await aligned(make_bridge, canned, clock)
    headers, body = await fetch(bridge, path)
    etag = headers["ETag"]
    assert re.fullmatch(r'"[^"]+"', etag) and headers["Vary"] == "Accept-Encoding"

    for asked in (etag, f'"other", W/{etag}', "*"):
        again, empty = await fetch(bridge, path, 304, If_None_Match=asked)
        assert empty == b"" and again["ETag"] == etag
        assert again["X-Poolscope-Stale"] == "false" and "Cache-Control" in again
    assert (await fetch(bridge, path, If_None_Match='"other"'))[1] == body

    evaluate(canned, clock, "7")
    changed, new_body = await fetch(bridge, path, If_None_Match=etag)
    assert changed["ETag"] != etag and new_body != body
    assert (await fetch(bridge, path, 304, If_None_Match=changed["ETag"]))[1] == b""


async def test_the_envelope_keeps_no_age_the_headers_say_it(
        canned: CannedPrometheus, make_bridge: MakeBridge, clock: FakeClock) -> None:
    bridge = await aligned(make_bridge, canned, clock)
    first, body = await fetch(bridge, POOLS)
    clock.now += 2.25
    later, same = await fetch(bridge, POOLS)
    assert same == body and later["ETag"] == first["ETag"]
    assert list(orjson.loads(body)) == ["schema_version", "generated_at", "rollups_at", "stale",
                                    "pools"]
    assert (first["Age"], first["X-Poolscope-Age-S"]) == ("0", "0.000")
    assert (later["Age"], later["X-Poolscope-Age-S"]) == ("2", "2.250")


@pytest.mark.parametrize("path", [POOLS, ONE, SOURCES])
async def test_gzip_decodes_to_the_same_json_and_is_its_own_representation(
        path: str, canned: CannedPrometheus, make_bridge: MakeBridge,
        clock: FakeClock) -> None:
    bridge = await aligned(make_bridge, canned, clock)
    plain_headers, plain = await fetch(bridge, path, Accept_Encoding="identity")
    assert "Content-Encoding" not in plain_headers
    url = str(bridge.http.make_url(path))
    async with aiohttp.ClientSession(auto_decompress=False) as raw, raw.get(
            url, headers={"Accept-Encoding": "br;q=1.0, gzip;q=0.8"}) as resp:
        zipped, zipped_headers = await resp.read(), resp.headers
    assert zipped_headers["Content-Encoding"] == "gzip"
    assert orjson.loads(gzip.decompress(zipped)) == orjson.loads(plain)
    assert zipped_headers["ETag"] != plain_headers["ETag"]
    # Either coding's tag names the same data: a client that switches gets a 304.
    await fetch(bridge, path, 304, Accept_Encoding="gzip", If_None_Match=plain_headers["ETag"])
    await fetch(bridge, path, 304, If_None_Match=zipped_headers["ETag"])


@pytest.mark.parametrize(("accept", "gzipped"), [
    ("gzip", True), ("GZIP;q=0.5", True), ("deflate, *", True), ("x-gzip", True),
    ("", False), ("identity", False), ("gzip;q=0", False), ("gzip;q=0, *", False),
    ("*;q=0", False), ("br", False), ("gzip;q=bad", False)])
def test_accept_encoding_is_read_as_rfc_9110_says(accept: str, gzipped: bool) -> None:
    assert accepts_gzip(accept) is gzipped


async def test_a_stale_snapshot_is_another_body_that_says_so(
        canned: CannedPrometheus, make_bridge: MakeBridge, clock: FakeClock) -> None:
    bridge = await aligned(make_bridge, canned, clock)
    fresh = {path: (await fetch(bridge, path))[0] for path in (POOLS, ONE)}
    canned.fail_status = 503  # the rules are due; no backend answers
    clock.now += INTERVAL_S + 1
    for path, before in fresh.items():
        stale, body = await fetch(bridge, path, If_None_Match=before["ETag"])
        assert stale["ETag"] != before["ETag"] and body
        assert stale["X-Poolscope-Stale"] == "true"
        assert stale["Cache-Control"] == "no-cache"
        assert (stale["Age"], stale["X-Poolscope-Age-S"]) == ("6", "6.000")
        assert stale["X-Poolscope-Generated-At"] == before["X-Poolscope-Generated-At"]
        await fetch(bridge, path, 304, If_None_Match=stale["ETag"])
    assert orjson.loads((await fetch(bridge, POOLS))[1])["stale"] is True

    canned.fail_status = None  # read again in full: a new snapshot, fresh
    clock.now += 1
    back, _ = await fetch(bridge, POOLS, If_None_Match=fresh[POOLS]["ETag"])
    assert back["X-Poolscope-Stale"] == "false" and back["Cache-Control"] != "no-cache"


async def test_max_age_lasts_until_the_next_evaluation_counted_from_age(
        canned: CannedPrometheus, make_bridge: MakeBridge, clock: FakeClock) -> None:
    """An RFC 9111 cache keeps an answer while Age plus its time held is under max-age:
    max-age minus Age is the time left until the rules are due, whole seconds down."""
    bridge = await aligned(make_bridge, canned, clock)
    written = clock.now
    for elapsed in (0.0, 1.5, 4.2, 4.99):
        clock.now = written + elapsed
        headers, _ = await fetch(bridge, POOLS)
        age = int(headers["Age"])
        assert age == int(elapsed)
        assert max_age(headers) - age == int(written + INTERVAL_S - clock.now)
    clock.now = written + 7.5  # due, and nothing new yet: fresh, but not to be kept
    headers, _ = await fetch(bridge, POOLS)
    assert headers["X-Poolscope-Stale"] == "false"
    assert max_age(headers) == int(headers["Age"]) == 7


async def test_each_body_is_rendered_and_compressed_once_per_snapshot(
        canned: CannedPrometheus, make_bridge: MakeBridge, clock: FakeClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    renders: list[Any] = []
    compressions: list[int] = []

    def counting(encode: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
        def counted(doc: Any) -> bytes:
            renders.append(doc)
            return encode(doc)
        return counted

    def compress(body: bytes, real: Callable[[bytes], bytes] = http_cache._compress) -> bytes:
        compressions.append(len(body))
        return real(body)

    monkeypatch.setattr(scheduler_app, "encode_json", counting(scheduler_app.encode_json))
    monkeypatch.setattr(http_cache, "_compress", compress)
    bridge = await aligned(make_bridge, canned, clock)
    asks = [{}, {"Accept_Encoding": "gzip"}, {"Accept_Encoding": "identity"}]
    for i in range(6):
        clock.now += 0.5
        await fetch(bridge, POOLS, **asks[i % 3])
        await fetch(bridge, ONE, **asks[i % 3])
    assert [type(doc) for doc in renders] == [dict, dict]  # the envelope, one pool
    assert len(compressions) == 2

    evaluate(canned, clock, "3")
    for _ in range(3):
        await fetch(bridge, POOLS, Accept_Encoding="gzip")
    assert len(renders) == 3 and len(compressions) == 3


async def test_the_typed_client_revalidates_and_reuses_what_it_parsed(
        canned: CannedPrometheus, make_bridge: MakeBridge, clock: FakeClock) -> None:
    bridge = await aligned(make_bridge, canned, clock)
    url = str(bridge.http.make_url(""))

    def answered(status: str) -> float:
        return bridge.metric(ANSWERS, route=POOLS, status=status)

    async with aiohttp.ClientSession(auto_decompress=True) as session:
        client = SchedulerBridgeClient(url, session)
        first = await client.snapshot()
        clock.now += 1.5
        second = await client.snapshot()
        assert (answered("200"), answered("304")) == (1, 1)
        assert second.pools is first.pools  # nothing parsed again
        assert (first.age_s, second.age_s) == (0.0, 1.5)
        assert second.stale is False

        evaluate(canned, clock, "9")
        third = await client.snapshot()
        assert (answered("200"), answered("304")) == (2, 1)
        assert third.pools["a"].load.inflight_total == 9
        assert third.generated_at > first.generated_at


async def test_the_typed_client_asks_for_gzip(
        canned: CannedPrometheus, make_bridge: MakeBridge, clock: FakeClock) -> None:
    bridge = await aligned(make_bridge, canned, clock)
    codings: list[str | None] = []

    async def on_end(session: object, context: object,
                     params: aiohttp.TraceRequestEndParams) -> None:
        codings.append(params.response.headers.get("Content-Encoding"))

    trace = aiohttp.TraceConfig()
    trace.on_request_end.append(on_end)
    async with aiohttp.ClientSession(trace_configs=[trace]) as session:
        snap = await SchedulerBridgeClient(str(bridge.http.make_url("")), session).snapshot()
    assert codings == ["gzip"] and "a" in snap.pools
