"""Startup refusals, the PromQL a proxy_id can reach, stale serving, and the bridge's
own endpoints."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.canned_prometheus import pool_series
from poolscope.bridge.app import Settings
from poolscope.bridge.local_queries import LocalQueries
from poolscope.bridge.promql import InvalidProxyId, scoped, string_literal, validate_proxy_id
from poolscope.bridge.queries import EVALUATED_QUERY, snapshot_queries
from poolscope.proxy_bridge.__main__ import build_parser, main
from poolscope.proxy_bridge.app import create_app
from poolscope.service.auth import Access
from poolscope.service.identity import ID
from poolscope.service.web import Exposure
from tests.proxy_bridge.conftest import PID, MakeBridge
from tests.proxy_bridge.pool_data import CannedPool, Inst, raw_series
from tests.scheduler_bridge.conftest import FakeClock

HOSTILE = ['a",__name__=~".+', 'a"} or vector(1) #', "a\\", 'x"', "a\nb", "a{b}", "a b",
           "", "x" * 129, "pool-1'", "é"]


@pytest.mark.parametrize("proxy_id", HOSTILE)
def test_hostile_ids_are_refused_at_startup(proxy_id: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--proxy-id", proxy_id, "--prometheus-url", "http://127.0.0.1:1"])
    assert exit_.value.code == 2
    assert "--proxy-id" in capsys.readouterr().err
    with pytest.raises(InvalidProxyId):
        create_app(proxy_id, Settings(backends=("http://127.0.0.1:1",)))


def _unquote(literal: str) -> str:
    """Read one PromQL double-quoted literal back as Prometheus' lexer does (Go escapes)."""
    assert literal[0] == literal[-1] == '"'
    out, chars = [], iter(literal[1:-1])
    for ch in chars:
        assert ch not in '"\n', "an unescaped quote or newline ends the literal early"
        if ch == "\\":
            out.append({"\\": "\\", '"': '"', "n": "\n", "r": "\r"}[next(chars)])
        else:
            out.append(ch)
    return "".join(out)


@given(st.text())
def test_any_text_stays_inside_its_string_literal(value: str) -> None:
    assert _unquote(string_literal(value)) == value


@given(st.from_regex(ID, fullmatch=True))
def test_a_valid_id_changes_nothing_but_the_matcher_value(proxy_id: str) -> None:
    """The queries for any valid id are the template's, with only the id substituted."""
    template = [*LocalQueries.for_pool("ID").all(),
                *(scoped(q, "ID") for q in (EVALUATED_QUERY, *snapshot_queries(3)))]
    actual = [*LocalQueries.for_pool(validate_proxy_id(proxy_id)).all(),
              *(scoped(q, proxy_id) for q in (EVALUATED_QUERY, *snapshot_queries(3)))]
    for t, a in zip(template, actual, strict=True):
        assert a == t.replace('proxy_id="ID"', f'proxy_id="{proxy_id}"')


def test_scoped_refuses_what_is_not_one_label_selector() -> None:
    for query in ("sum(proxy_pool:x)", "{a=\"1\"} or {b=\"2\"}", "}{"):
        with pytest.raises(ValueError, match="one label selector"):
            scoped(query, "a")
    assert scoped(EVALUATED_QUERY, "a") == (
        'max(timestamp({__name__="proxy_pool:data_quality",proxy_id="a"}))')


async def test_backend_down_serves_stale_then_503(canned: CannedPool, make_bridge: MakeBridge,
                                                  clock: FakeClock) -> None:
    canned.vector = [*pool_series(PID), *raw_series(PID, [Inst("i-1")])]
    canned.set_local(PID, [Inst("i-1")])
    bridge = await make_bridge(canned.url, cache_ttl_s=1.0, stale_after_s=10.0)
    fresh = await bridge.http.get("/debug/pool_resource")
    assert fresh.headers["X-Poolscope-Stale"] == "false"
    good = await fresh.read()

    canned.fail_status = 500
    clock.now += 5
    stale = await bridge.http.get("/debug/pool_resource")
    assert stale.status == 200 and stale.headers["X-Poolscope-Stale"] == "true"
    assert await stale.read() == good  # the last good summary, its generated_at unchanged
    local = await bridge.get("/debug/pool_resource?detail=local")
    assert local["stale"] is True and local["instances"][0]["instance_id"] == "i-1"
    assert (await bridge.get("/readyz", status=503))["age_s"] == 5.0

    clock.now += 10
    for path in ("/debug/pool_resource", "/v1/pool_resource/heartbeat_payload",
                 "/debug/pool_resource?detail=local", "/debug/pool_resource_sources"):
        body = await bridge.get(path, status=503)
        assert body["backends"][0]["cause"] == "api_error", path


async def test_health_ready_and_own_metrics(canned: CannedPool,
                                            make_bridge: MakeBridge) -> None:
    canned.vector = pool_series(PID)
    canned.set_local(PID, [])
    bridge = await make_bridge(canned.url)
    assert (await bridge.get("/healthz")) == {"status": "ok"}
    assert (await bridge.get("/readyz"))["status"] == "ready"
    await bridge.get("/debug/pool_resource")
    await bridge.get("/debug/pool_resource?detail=nope", status=400)
    text = await (await bridge.http.get("/metrics")).text()
    assert "poolscope_scheduler_bridge_" not in text
    ok = re.search(r'poolscope_proxy_bridge_request_duration_seconds_count\{'
                   r'route="/debug/pool_resource",status="200"\} (\S+)', text)
    assert ok and float(ok.group(1)) == 1
    assert 'route="/debug/pool_resource",status="400"' in text
    assert bridge.registry.get_sample_value(
        "poolscope_proxy_bridge_refreshes_total", {"outcome": "ok"}) == 1
    assert bridge.registry.get_sample_value(
        "poolscope_proxy_bridge_local_views_total", {"outcome": "ok"}) == 1


async def test_token_guards_all_but_healthz(canned: CannedPool,
                                            make_bridge: MakeBridge) -> None:
    canned.vector = pool_series(PID)
    bridge = await make_bridge(canned.url, exposure=Exposure(Access(bearer_token="s3cret")))
    assert (await bridge.http.get("/healthz")).status == 200
    for path in ("/debug/pool_resource", "/debug/pool_resource_sources",
                 "/v1/pool_resource/heartbeat_payload"):
        assert (await bridge.http.get(path)).status == 401
    resp = await bridge.http.get("/debug/pool_resource",
                                 headers={"Authorization": "Bearer s3cret"})
    assert resp.status == 200
    assert canned.queries  # only the authorised request reached Prometheus


def test_cli_defaults_and_flags() -> None:
    args = build_parser().parse_args(["--proxy-id", PID, "--prometheus-url", "http://a",
                                "--prometheus-url", "http://b"])
    assert args.listen == ("127.0.0.1", 10120)
    assert args.proxy_id == PID and args.prometheus_url == ["http://a", "http://b"]
    assert main(["--proxy-id", PID, "--prometheus-url", "http://a",
                 "--tls-cert", "/nonexistent.pem"]) == 2
