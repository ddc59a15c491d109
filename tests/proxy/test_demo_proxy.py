"""The demo Proxy end to end, in process, in front of a fake engine."""

from __future__ import annotations

import asyncio
import shutil
import subprocess

import pytest
from prometheus_client import generate_latest

from deploy.demo.proxy_chat import PathConfig
from deploy.demo.proxy_select import Strategy
from tests.proxy.conftest import HOLD, PROXY_ID, FakeClock, MakeHarness, eventually

INSTANT = PathConfig(prepare_ms_mean=0)


async def test_load_sanity_counts_exactly_n_and_inflight_returns_to_measured_zero(
        make_harness: MakeHarness) -> None:
    h = await make_harness()
    await h.register()
    assert h.outcomes("ok") == 0.0
    n = 12
    calls = [asyncio.create_task(h.chat(HOLD, stream=i % 2 == 0)) for i in range(n)]
    await eventually(lambda: h.inflight() == n, f"{n} requests in flight")
    h.engine.release()
    answers = await asyncio.gather(*calls)

    assert [status for status, _ in answers] == [200] * n
    streamed = [text for i, (_, text) in enumerate(answers) if i % 2 == 0]
    assert all(text.rstrip().endswith("data: [DONE]") for text in streamed)
    assert h.outcomes("ok") == n
    assert sum(h.outcomes(o) or 0 for o in ("error", "timeout", "rejected", "cancelled")) == 0
    assert h.sample("poolscope_proxy_instance_requests_total", instance_id="i-1",
                    source="proxy_dispatch", outcome="ok") == n
    assert h.sample("poolscope_proxy_instance_request_duration_seconds_count",
                    instance_id="i-1", source="proxy_dispatch") == n
    assert h.inflight() == 0.0  # measured zero, not absent
    assert h.depth("prepare") == 0.0
    assert h.depth("ready") == 0.0


async def test_capacity_holds_the_rest_in_the_ready_queue(make_harness: MakeHarness) -> None:
    h = await make_harness()
    await h.register(capacity=2)
    calls = [asyncio.create_task(h.chat(HOLD)) for _ in range(5)]
    await eventually(lambda: h.depth("ready") == 3, "three requests waiting for a slot")
    assert h.inflight() == 2
    assert h.sample("poolscope_proxy_queue_oldest_age_seconds", source="proxy_queue",
                    queue="ready") is not None
    assert h.sample("poolscope_proxy_instance_capacity_requests", instance_id="i-1",
                    source="configured") == 2
    h.engine.release()
    assert [s for s, _ in await asyncio.gather(*calls)] == [200] * 5
    assert h.depth("ready") == 0.0
    assert h.sample("poolscope_proxy_queue_oldest_age_seconds", source="proxy_queue",
                    queue="ready") is None
    assert h.sample("poolscope_proxy_queue_wait_seconds_count", source="proxy_queue",
                    queue="ready") == 5


async def test_the_load_report_counts_the_ready_line_with_the_inflight(
        make_harness: MakeHarness) -> None:
    """GET /v1/pool_load: what the Proxy would put in its heartbeat, read live."""
    h = await make_harness()
    await h.register(capacity=2)
    calls = [asyncio.create_task(h.chat(HOLD)) for _ in range(5)]
    await eventually(lambda: h.depth("ready") == 3, "three requests waiting for a slot")
    report = await (await h.client.get("/v1/pool_load")).json()
    assert report["proxy_id"] == PROXY_ID
    assert {k: report["load"][k] for k in ("inflight_total", "capacity", "ready_queue_depth",
                                           "prepare_queue_depth")} == {
        "inflight_total": 2.0, "capacity": 2.0, "ready_queue_depth": 3.0,
        "prepare_queue_depth": 0.0}
    h.engine.release()
    await asyncio.gather(*calls)
    report = await (await h.client.get("/v1/pool_load")).json()
    assert (report["load"]["inflight_total"], report["load"]["ready_queue_depth"]) == (0.0, 0.0)


async def test_client_disconnect_mid_stream_cancels_upstream_and_leaves_nothing(
        make_harness: MakeHarness) -> None:
    h = await make_harness()
    h.engine.hang_after_first_chunk = True
    await h.register()
    resp = await h.client.post("/v1/chat/completions", json={
        "stream": True, "messages": [{"role": "user", "content": "x"}]})
    assert (await resp.content.readline()).startswith(b"data: ")
    assert h.inflight() == 1
    resp.close()  # the client goes away mid-stream

    await eventually(lambda: h.outcomes("cancelled") == 1, "the request counted cancelled")
    assert h.inflight() == 0.0
    assert h.sample("poolscope_proxy_instance_requests_total", instance_id="i-1",
                    source="proxy_dispatch", outcome="cancelled") == 1
    await eventually(lambda: h.engine.disconnected == 1, "the engine saw the cancellation")


async def test_client_disconnect_while_queued_empties_the_queue(
        make_harness: MakeHarness) -> None:
    h = await make_harness()
    await h.register(capacity=1)
    first = asyncio.create_task(h.chat(HOLD))
    await eventually(lambda: h.inflight() == 1, "the first request dispatched")
    second = asyncio.create_task(h.chat("y"))
    await eventually(lambda: h.depth("ready") == 1, "the second request queued")
    second.cancel()

    await eventually(lambda: h.outcomes("cancelled") == 1, "the queued request cancelled")
    assert h.depth("ready") == 0.0
    assert h.sample("poolscope_proxy_queue_rejections_total", source="proxy_queue",
                    queue="ready", reason="timeout") == 0
    h.engine.release()
    assert (await first)[0] == 200
    assert h.inflight() == 0.0


@pytest.mark.parametrize(("status", "outcome"), [(500, "error"), (503, "rejected")])
async def test_engine_errors_are_counted_and_release_the_slot(
        make_harness: MakeHarness, status: int, outcome: str) -> None:
    h = await make_harness()
    h.engine.status = status
    await h.register()
    assert (await h.chat())[0] == status
    assert (await h.chat(stream=True))[0] == status
    assert h.outcomes(outcome) == 2
    assert h.sample("poolscope_proxy_instance_requests_total", instance_id="i-1",
                    source="proxy_dispatch", outcome=outcome) == 2
    assert h.inflight() == 0.0


async def test_unreachable_engine_is_an_error_with_502(make_harness: MakeHarness) -> None:
    h = await make_harness()
    h.engine_url = "http://127.0.0.1:9"  # discard port: nothing listens
    await h.register()
    assert (await h.chat())[0] == 502
    assert h.outcomes("error") == 1
    assert h.inflight() == 0.0


async def test_full_ready_queue_rejects_with_503(make_harness: MakeHarness) -> None:
    h = await make_harness(PathConfig(prepare_ms_mean=0, ready_capacity=1))
    await h.register(capacity=1)
    held = asyncio.create_task(h.chat(HOLD))
    await eventually(lambda: h.inflight() == 1, "the slot taken")
    waiting = asyncio.create_task(h.chat())
    await eventually(lambda: h.depth("ready") == 1, "the ready queue full")

    status, body = await h.chat()
    assert status == 503
    assert "ready queue is full" in body
    assert h.sample("poolscope_proxy_queue_rejections_total", source="proxy_queue",
                    queue="ready", reason="full") == 1
    assert h.outcomes("rejected") == 1
    h.engine.release()
    assert [(await held)[0], (await waiting)[0]] == [200, 200]
    assert h.outcomes("ok") == 2


async def test_queue_timeout_answers_504_and_keeps_gauges_exact(
        make_harness: MakeHarness) -> None:
    h = await make_harness(PathConfig(prepare_ms_mean=0, queue_timeout=0.2))
    await h.register(capacity=1)
    held = asyncio.create_task(h.chat(HOLD))
    await eventually(lambda: h.inflight() == 1, "the slot taken")

    status, body = await h.chat()
    assert status == 504
    assert "queue timeout" in body
    assert h.sample("poolscope_proxy_queue_rejections_total", source="proxy_queue",
                    queue="ready", reason="timeout") == 1
    assert h.outcomes("timeout") == 1
    assert h.depth("ready") == 0.0
    assert h.inflight() == 1
    h.engine.release()
    assert (await held)[0] == 200
    assert h.inflight() == 0.0


async def test_preparation_passes_through_the_prepare_queue(make_harness: MakeHarness) -> None:
    h = await make_harness(PathConfig(prepare_ms_mean=1, prepare_workers=1))
    await h.register()
    assert [s for s, _ in await asyncio.gather(*(h.chat() for _ in range(4)))] == [200] * 4
    assert h.sample("poolscope_proxy_queue_wait_seconds_count", source="proxy_queue",
                    queue="prepare") == 4
    assert h.depth("prepare") == 0.0
    assert h.sample("poolscope_proxy_queue_capacity", source="configured",
                    queue="prepare") == INSTANT.prepare_capacity


async def test_no_alive_instance_is_503(make_harness: MakeHarness) -> None:
    h = await make_harness()
    status, body = await h.chat()
    assert status == 503
    assert "no alive Instance" in body
    assert h.outcomes("rejected") == 1


async def test_silent_instance_turns_not_alive_after_the_timeout(
        make_harness: MakeHarness) -> None:
    clock = FakeClock()
    h = await make_harness(clock=clock, heartbeat_timeout=5.0)
    await h.register()
    alive = {"instance_id": "i-1", "source": "proxy_registry"}
    assert h.sample("poolscope_proxy_instance_alive", **alive) == 1
    clock.advance(5.0)
    assert h.sample("poolscope_proxy_instance_alive", **alive) == 1
    clock.advance(0.5)
    assert h.sample("poolscope_proxy_instance_alive", **alive) == 0
    assert h.sample("poolscope_proxy_instance_registered", **alive) == 1
    assert h.sample("poolscope_proxy_instance_heartbeat_age_seconds", **alive) == 5.5
    assert (await (await h.client.get("/v1/instance/list")).json())["instances"] == []
    listed = await (await h.client.get("/v1/instance/list?include_dead=true")).json()
    assert [(i["instance_id"], i["alive"]) for i in listed["instances"]] == [("i-1", False)]
    assert (await h.chat())[0] == 503

    assert (await h.client.post("/v1/instance/heartbeat",
                                json={"instance_id": "i-1"})).status == 200
    assert h.sample("poolscope_proxy_instance_alive", **alive) == 1
    assert (await h.chat())[0] == 200


async def test_deregistered_instance_leaves_no_series(make_harness: MakeHarness) -> None:
    h = await make_harness()
    await h.register("i-1", capacity=4)
    await h.register("i-2")
    assert (await h.chat())[0] == 200
    await h.client.post("/v1/instance/resource_snapshot",
                        json={"instance_id": "i-1", "snapshot": {"cpu": 0.5}})
    resp = await h.client.post("/v1/instance/deregister", json={"instance_id": "i-1"})
    assert resp.status == 200

    text = (await (await h.client.get("/metrics")).text())
    assert 'instance_id="i-1"' not in text
    assert 'instance_id="i-2"' in text
    assert (await h.client.post("/v1/instance/heartbeat",
                                json={"instance_id": "i-1"})).status == 404


async def test_idle_and_last_dispatch_are_absent_until_the_first_dispatch(
        make_harness: MakeHarness) -> None:
    clock = FakeClock()
    h = await make_harness(clock=clock)
    await h.register()
    labels = {"instance_id": "i-1", "source": "proxy_dispatch"}
    assert h.sample("poolscope_proxy_instance_idle_seconds", **labels) is None
    assert h.sample("poolscope_proxy_instance_last_dispatch_timestamp_seconds",
                    **labels) is None
    assert (await h.chat())[0] == 200
    clock.advance(7.0)
    assert h.sample("poolscope_proxy_instance_idle_seconds", **labels) == 7.0
    assert h.sample("poolscope_proxy_instance_last_dispatch_timestamp_seconds",
                    **labels) == clock.now_wall - 7.0


async def test_resource_snapshot_records_its_time(make_harness: MakeHarness) -> None:
    clock = FakeClock()
    h = await make_harness(clock=clock)
    await h.register()
    instance, = h.exporter.instances.instances()
    assert instance.last_resource_report_time is None
    resp = await h.client.post("/v1/instance/resource_snapshot",
                               json={"instance_id": "i-1", "snapshot": {"cpu": 0.1}})
    assert resp.status == 200
    assert (instance.last_resource_report_time, instance.resource_snapshot) == (
        clock.now_wall, {"cpu": 0.1})
    unknown = await h.client.post("/v1/instance/resource_snapshot",
                                  json={"instance_id": "nope", "snapshot": {}})
    assert unknown.status == 404


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/instance/register", {"url": "http://x"}),
    ("/v1/instance/register", {"instance_id": "i", "url": "x"}),
    ("/v1/instance/register", {"instance_id": "i", "url": "http://x", "capacity": 0}),
    ("/v1/instance/register", {"instance_id": "i", "url": "http://x", "capacity": True}),
    ("/v1/instance/register", {"instance_id": "i", "url": "http://x", "admission_state": 2}),
    ("/v1/instance/heartbeat", {"instance_id": 3}),
    ("/v1/instance/deregister", []),
    ("/v1/instance/resource_snapshot", {"instance_id": "i", "snapshot": [1]}),
])
async def test_control_plane_refuses_malformed_input(
        make_harness: MakeHarness, path: str, body: object) -> None:
    h = await make_harness()
    resp = await h.client.post(path, json=body)
    assert resp.status == 400
    assert "error" in await resp.json()
    assert h.exporter.instances.instances() == []


async def test_an_instance_states_it_is_asleep_in_its_heartbeats(
        make_harness: MakeHarness) -> None:
    """Each heartbeat restates the state: one without it states none, so a woken engine
    is counted again; a state outside the catalog is refused and changes nothing."""
    h = await make_harness()
    resp = await h.client.post("/v1/instance/register", json={
        "instance_id": "i-1", "url": h.engine_url, "capacity": 4, "admission_state": "asleep"})
    assert resp.status == 200
    assert (await resp.json())["instance"]["admission_state"] == "asleep"

    async def report() -> tuple[object, object]:
        body = await (await h.client.get("/v1/pool_load")).json()
        return body["load"]["capacity"], body["health"]["pool_admission_state"]

    assert await report() == (0.0, "asleep")
    bad = await h.client.post("/v1/instance/heartbeat",
                              json={"instance_id": "i-1", "admission_state": "napping"})
    assert bad.status == 400 and "accepting" in (await bad.json())["error"]
    assert await report() == (0.0, "asleep")
    assert (await h.client.post("/v1/instance/heartbeat",
                                json={"instance_id": "i-1"})).status == 200
    assert await report() == (4.0, None)
    assert h.sample("poolscope_proxy_pool_capacity_requests", source="configured") == 4.0


async def test_malformed_chat_request_is_400_and_not_counted(make_harness: MakeHarness) -> None:
    h = await make_harness()
    await h.register()
    resp = await h.client.post("/v1/chat/completions", data=b"{not json")
    assert resp.status == 400
    assert all(h.outcomes(o) == 0 for o in ("ok", "error", "rejected"))


async def _spread(h_strategy: Strategy, make_harness: MakeHarness) -> dict[str, float]:
    h = await make_harness(PathConfig(prepare_ms_mean=0, strategy=h_strategy))
    for i in (1, 2, 3):
        await h.register(f"i-{i}")
    held = [asyncio.create_task(h.chat(HOLD)) for _ in range(2)]
    await eventually(lambda: (h.inflight("i-1") or 0) + (h.inflight("i-2") or 0) == 2,
                     "two held requests on i-1 and i-2")
    for _ in range(4):
        assert (await h.chat())[0] == 200
    h.engine.release()
    await asyncio.gather(*held)
    return {i: h.sample("poolscope_proxy_instance_requests_total", instance_id=i,
                        source="proxy_dispatch", outcome="ok") or 0 for i in ("i-1", "i-2", "i-3")}


async def test_least_inflight_avoids_busy_instances(make_harness: MakeHarness) -> None:
    assert await _spread(Strategy.LEAST_INFLIGHT, make_harness) == {
        "i-1": 1, "i-2": 1, "i-3": 4}


async def test_round_robin_rotates_regardless_of_load(make_harness: MakeHarness) -> None:
    assert await _spread(Strategy.ROUND_ROBIN, make_harness) == {"i-1": 2, "i-2": 2, "i-3": 2}


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
async def test_metrics_output_passes_promtool(make_harness: MakeHarness) -> None:
    h = await make_harness()
    await h.register("i-1", capacity=2)
    await h.register("i-2")
    assert (await h.chat(stream=True))[0] == 200
    text = generate_latest(h.metrics)
    assert f'proxy_id="{PROXY_ID}"'.encode() in text
    check = subprocess.run(["promtool", "check", "metrics"], input=text,
                           capture_output=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.strip() == b"" and check.stderr.strip() == b""
