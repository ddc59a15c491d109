"""The simulated engine behaves like a loaded vLLM, on vLLM's own metric names.

Engine time is a manual clock: requests stay exactly where a test put them
until it advances the clock, so the tests look at load states without racing
real time. Waiting for the HTTP side to settle is done by polling for a state
(`until`), never by asserting on durations.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import json
import logging
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from prometheus_client.parser import text_string_to_metric_families

from deploy.demo import engine_sim, sim_registration
from deploy.demo.engine_sim import start
from deploy.demo.sim_app import SimulatedEngine
from deploy.demo.sim_chat import estimate_prompt_tokens
from deploy.demo.sim_registration import Registrar, RegistrationConfig
from deploy.demo.sim_scheduler import EngineConfig
from harness import polling
from harness.prometheus import free_port

MODEL = "sim-test"
PROMPT_10_TOKENS = "x" * 40


class ManualClock:
    """Engine time that moves only when the test says so."""

    def __init__(self) -> None:
        self._now = 1000.0
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def now(self) -> float:
        return self._now

    async def sleep_until(self, deadline: float) -> None:
        if deadline <= self._now:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (deadline, next(self._order), fut))
        await fut

    def advance(self, seconds: float) -> None:
        self._now += seconds
        while self._sleepers and self._sleepers[0][0] <= self._now:
            fut = heapq.heappop(self._sleepers)[2]
            if not fut.done():
                fut.set_result(None)


async def until(predicate: Callable[[], Any], what: str, timeout: float = 10.0) -> None:
    """Poll until the (async) predicate holds; the timeout only bounds a broken run."""
    await polling.until(predicate, bool, what, timeout)


def config(**overrides: Any) -> EngineConfig:
    values: dict[str, Any] = {
        "model": MODEL, "max_running": 2, "max_waiting": 2, "tokens_per_second": 10.0,
        "prefill_ms_per_token": 100.0, "kv_cache_tokens": 100, "default_output_tokens": 3}
    return EngineConfig(**{**values, **overrides})


@dataclass
class Harness:
    engine: SimulatedEngine
    client: aiohttp.ClientSession
    clock: ManualClock

    async def scrape(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        resp = await self.client.get("/metrics")
        assert resp.status == 200
        text = await resp.text()
        samples = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                labels = {k: v for k, v in s.labels.items() if k not in ("model_name", "engine")}
                samples[(s.name, tuple(sorted(labels.items())))] = s.value
        return samples

    async def value(self, name: str, **labels: str) -> float:
        return (await self.scrape())[(name, tuple(sorted(labels.items())))]

    async def reads(self, expected: float, name: str, **labels: str) -> bool:
        return await self.value(name, **labels) == expected

    async def load_is(self, running: int, waiting: int) -> bool:
        m = await self.scrape()
        return (m[("vllm:num_requests_running", ())] == running
                and m[("vllm:num_requests_waiting", ())] == waiting)

    def chat(self, max_tokens: int | None = 5, stream: bool = False,
             **extra: Any) -> asyncio.Task[tuple[int, str]]:
        body: dict[str, Any] = {"model": MODEL, "stream": stream,
                                "messages": [{"role": "user", "content": PROMPT_10_TOKENS}],
                                **extra}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens

        async def call() -> tuple[int, str]:
            resp = await self.client.post("/v1/chat/completions", json=body)
            return resp.status, await resp.text()
        return asyncio.create_task(call())


@asynccontextmanager
async def engine(**overrides: Any) -> AsyncIterator[Harness]:
    clock = ManualClock()
    sim = SimulatedEngine(config(**overrides), clock=clock, seed=1)
    # Served exactly as the CLI serves it: disconnect handling depends on it.
    runner, url = await start(sim, "127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession(base_url=url) as client:
            yield Harness(sim, client, clock)
    finally:
        await runner.cleanup()


# vLLM v1's names, types and HELP texts (vllm/v1/metrics/loggers.py).
VLLM_FAMILIES = {
    "vllm:num_requests_running": ("gauge", "Number of requests in model execution batches."),
    "vllm:num_requests_waiting": ("gauge", "Number of requests waiting to be processed."),
    "vllm:kv_cache_usage_perc": ("gauge", "KV-cache usage. 1 means 100 percent usage."),
    "vllm:request_success": ("counter", "Count of successfully processed requests."),
    "vllm:prompt_tokens": ("counter", "Number of prefill tokens processed."),
    "vllm:generation_tokens": ("counter", "Number of generation tokens processed."),
    "vllm:e2e_request_latency_seconds": (
        "histogram", "Histogram of e2e request latency in seconds."),
    "vllm:time_to_first_token_seconds": (
        "histogram", "Histogram of time to first token in seconds."),
    "vllm:request_queue_time_seconds": (
        "histogram", "Histogram of time spent in WAITING phase for request."),
    "vllm:engine_sleep_state": (
        "gauge", "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means "
        "engine is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means "
        "sleep level 2."),
}


async def test_exposition_parses_with_vllm_names_help_and_labels() -> None:
    async with engine() as h:
        resp = await h.client.get("/metrics")
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        families = list(text_string_to_metric_families(await resp.text()))
    assert {f.name: (f.type, f.documentation) for f in families} == VLLM_FAMILIES
    for family in families:
        for sample in family.samples:
            assert sample.labels["model_name"] == MODEL
            assert sample.labels["engine"] == "0"
            assert set(sample.labels) - {"model_name", "engine"} <= {"finished_reason", "le",
                                                                     "sleep_state"}
    success = next(f for f in families if f.name == "vllm:request_success")
    assert {s.labels["finished_reason"]: s.value for s in success.samples} == {
        "stop": 0.0, "length": 0.0, "abort": 0.0}


async def test_metrics_follow_load_through_batch_and_queue() -> None:
    async with engine(max_running=2, max_waiting=2) as h:
        assert estimate_prompt_tokens([{"content": PROMPT_10_TOKENS}]) == 10
        assert await h.load_is(running=0, waiting=0)
        calls = [h.chat(max_tokens=5) for _ in range(4)]
        await until(lambda: h.load_is(running=2, waiting=2), "2 running, 2 waiting")

        status, body = await h.chat(max_tokens=5)
        assert status == 503
        assert json.loads(body)["error"]["code"] == 503
        assert await h.load_is(running=2, waiting=2)

        # Scheduled requests hold their prompts' KV blocks: 2 x 10 of 100 tokens.
        assert await h.value("vllm:kv_cache_usage_perc") == pytest.approx(0.2)
        h.clock.advance(1.0)  # prefill: 10 tokens x 100 ms
        await until(lambda: h.reads(20, "vllm:prompt_tokens_total"), "prefill counted")
        h.clock.advance(0.25)  # 2 tokens each at 10 tokens/s
        assert await h.value("vllm:generation_tokens_total") == 4
        assert await h.value("vllm:kv_cache_usage_perc") == pytest.approx(0.24)

        h.clock.advance(0.3)  # the first two are done; the queue moves into the batch
        await until(lambda: h.load_is(running=2, waiting=0), "waiters promoted")
        assert await h.value("vllm:request_success_total", finished_reason="length") == 2
        h.clock.advance(1.6)
        results = await asyncio.gather(*calls)

        await until(lambda: h.load_is(running=0, waiting=0), "idle again")
        m = await h.scrape()
    for status, body in results:
        assert status == 200
        answer = json.loads(body)
        assert answer["object"] == "chat.completion"
        assert answer["choices"][0]["finish_reason"] == "length"
        assert len(answer["choices"][0]["message"]["content"].split()) == 5
        assert answer["usage"] == {"prompt_tokens": 10, "completion_tokens": 5,
                                   "total_tokens": 15}
    assert m[("vllm:request_success_total", (("finished_reason", "length"),))] == 4
    assert m[("vllm:request_success_total", (("finished_reason", "stop"),))] == 0
    assert m[("vllm:request_success_total", (("finished_reason", "abort"),))] == 0
    assert m[("vllm:prompt_tokens_total", ())] == 40
    assert m[("vllm:generation_tokens_total", ())] == 20
    assert m[("vllm:kv_cache_usage_perc", ())] == 0.0
    assert m[("vllm:e2e_request_latency_seconds_count", ())] == 4
    # Two ran at once (1.55 s); two waited for them, then ran as long (3.15 s).
    assert m[("vllm:e2e_request_latency_seconds_sum", ())] == pytest.approx(2 * 1.55 + 2 * 3.15)
    assert m[("vllm:e2e_request_latency_seconds_bucket", (("le", "2.0"),))] == 2
    assert m[("vllm:request_queue_time_seconds_sum", ())] == pytest.approx(2 * 1.55)
    # First token: queue + 1 s prefill + 0.1 s for one token.
    assert m[("vllm:time_to_first_token_seconds_sum", ())] == pytest.approx(2 * 1.1 + 2 * 2.65)


async def test_stream_is_openai_sse_and_unbounded_request_stops() -> None:
    async with engine(default_output_tokens=3) as h:
        call = h.chat(max_tokens=None, stream=True, stream_options={"include_usage": True})
        await until(lambda: h.load_is(running=1, waiting=0), "running")
        h.clock.advance(10.0)
        status, body = await call
        assert await h.value("vllm:request_success_total", finished_reason="stop") == 1
    assert status == 200
    events = [e for e in body.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[1:-2])
    assert len(content.split()) == 3
    assert chunks[-2]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None,
                                        "finish_reason": "stop"}
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {"prompt_tokens": 10, "completion_tokens": 3,
                                   "total_tokens": 13}


async def test_disconnects_free_slots_and_count_as_aborts() -> None:
    async with engine(max_running=1, max_waiting=2) as h:
        running, waiting_a, waiting_b = h.chat(), h.chat(), h.chat()
        await until(lambda: h.load_is(running=1, waiting=2), "1 running, 2 waiting")

        waiting_a.cancel()
        await until(lambda: h.load_is(running=1, waiting=1), "waiter left the queue")
        running.cancel()
        await until(lambda: h.load_is(running=1, waiting=0), "last waiter took the slot")
        assert await h.value("vllm:request_success_total", finished_reason="abort") == 2

        h.clock.advance(10.0)
        assert (await waiting_b)[0] == 200
        await until(lambda: h.load_is(running=0, waiting=0), "idle")
        assert await h.value("vllm:request_success_total", finished_reason="length") == 1


async def test_stream_disconnect_mid_answer_frees_the_slot() -> None:
    async with engine(max_running=1, max_waiting=0) as h:
        resp = await h.client.post("/v1/chat/completions", json={
            "stream": True, "max_tokens": 50, "messages": [{"content": PROMPT_10_TOKENS}]})
        assert (await resp.content.readline()).startswith(b"data: ")
        h.clock.advance(1.2)  # prefill and two tokens
        await until(lambda: h.reads(2, "vllm:generation_tokens_total"), "decoding")
        resp.close()
        await until(lambda: h.load_is(running=0, waiting=0), "slot freed")
        m = await h.scrape()
    assert m[("vllm:request_success_total", (("finished_reason", "abort"),))] == 1
    assert m[("vllm:request_success_total", (("finished_reason", "length"),))] == 0
    # What was generated before the client left stays counted; nothing more is.
    assert m[("vllm:generation_tokens_total", ())] == 2


@pytest.mark.parametrize(("body", "reason"), [
    (b"{not json", "not valid JSON"),
    (b'{"messages": []}', "messages"),
    (b'{"messages": [{"content": "hi"}], "max_tokens": 0}', "max_tokens"),
    (b'{"messages": [{"content": "hi"}], "stream": "yes"}', "stream"),
])
async def test_bad_requests_get_400_and_leave_no_trace(body: bytes, reason: str) -> None:
    async with engine() as h:
        resp = await h.client.post("/v1/chat/completions", data=body)
        assert resp.status == 400
        assert reason in (await resp.json())["error"]["message"]
        assert await h.load_is(running=0, waiting=0)
        assert await h.value("vllm:request_success_total", finished_reason="abort") == 0


async def test_fault_modes_change_only_metrics() -> None:
    async with engine() as h:
        async def set_mode(mode: str) -> int:
            return (await h.client.post("/admin/fault", json={"mode": mode})).status

        assert await set_mode("error500") == 200
        assert (await h.client.get("/metrics")).status == 500
        assert (await h.client.get("/health")).status == 200

        assert await set_mode("garbage") == 200
        resp = await h.client.get("/metrics")
        assert resp.status == 200
        with pytest.raises(ValueError):
            list(text_string_to_metric_families(await resp.text()))

        assert await set_mode("hang") == 200
        hung = asyncio.create_task(h.client.get("/metrics"))
        done, _ = await asyncio.wait({hung}, timeout=0.2)
        assert not done, "a hung /metrics answered"
        assert (await (await h.client.get("/admin/fault")).json()) == {"mode": "hang"}
        assert await set_mode("none") == 200
        assert (await hung).status == 200  # released, and answers normally

        assert await set_mode("sideways") == 400
        assert (await (await h.client.get("/admin/fault")).json()) == {"mode": "none"}
        assert await h.load_is(running=0, waiting=0)


@dataclass
class ControlPlane:
    """A stand-in for the demo Proxy's control plane that records what arrives."""

    register_failures: int = 0
    heartbeat_404s: int = 0
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def app(self) -> web.Application:
        async def handle(request: web.Request) -> web.Response:
            verb = request.match_info["verb"]
            self.calls.append((verb, await request.json()))
            if verb == "register" and self.register_failures > 0:
                self.register_failures -= 1
                return web.Response(status=503)
            if verb == "heartbeat" and self.heartbeat_404s > 0:
                self.heartbeat_404s -= 1
                return web.Response(status=404)
            return web.json_response({"ok": True})

        app = web.Application()
        app.router.add_post("/v1/instance/{verb}", handle)
        return app

    def verbs(self) -> list[str]:
        return [verb for verb, _ in self.calls]


@asynccontextmanager
async def control_plane(cp: ControlPlane, port: int | None = None) -> AsyncIterator[str]:
    server = TestServer(cp.app(), port=port)
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


def registration(url: str, **overrides: Any) -> RegistrationConfig:
    values: dict[str, Any] = {
        "control_plane_url": url, "instance_id": "i-1", "engine_url": "http://127.0.0.1:1",
        "capacity": 4, "heartbeat_interval": 0.02, "retry_initial": 0.01, "retry_max": 0.05}
    return RegistrationConfig(**{**values, **overrides})


async def test_registers_after_refusals_heartbeats_and_deregisters() -> None:
    cp = ControlPlane(register_failures=2)
    async with control_plane(cp) as url:
        registrar = Registrar(registration(url))
        await registrar.start()
        await until(lambda: cp.verbs().count("heartbeat") >= 2, "two heartbeats")
        await registrar.stop()
    verbs = cp.verbs()
    assert verbs[:3] == ["register"] * 3
    assert set(verbs[3:-1]) == {"heartbeat"}
    assert verbs[-1] == "deregister"
    assert cp.calls[0][1] == {"instance_id": "i-1", "url": "http://127.0.0.1:1", "capacity": 4}
    assert {json.dumps(body) for verb, body in cp.calls if verb != "register"} == {
        json.dumps({"instance_id": "i-1"})}


async def test_forgotten_instance_registers_again() -> None:
    cp = ControlPlane(heartbeat_404s=1)
    async with control_plane(cp) as url:
        registrar = Registrar(registration(url, capacity=None))
        await registrar.start()
        await until(lambda: cp.verbs().count("register") == 2, "re-registration")
        await registrar.stop()
    assert cp.verbs()[:3] == ["register", "heartbeat", "register"]
    assert cp.calls[2][1]["capacity"] is None


async def test_heartbeats_say_asleep_while_the_engine_sleeps() -> None:
    """The Proxy leaves an asleep member's capacity out of its load report; awake, the
    engine states nothing (judging its load is the Instance exporter's work)."""
    cp = ControlPlane()

    def heartbeats_since(mark: int) -> list[dict[str, Any]]:
        return [body for verb, body in cp.calls[mark:] if verb == "heartbeat"]

    async with engine() as h, control_plane(cp) as url:
        registrar = Registrar(registration(url), h.engine.admission_state)
        await registrar.start()
        await until(lambda: heartbeats_since(0), "a heartbeat")
        assert (await h.client.post("/sleep?level=1")).status == 200
        mark = len(cp.calls)
        await until(lambda: len(heartbeats_since(mark)) >= 2, "two heartbeats asleep")
        assert heartbeats_since(mark)[-1] == {"instance_id": "i-1", "admission_state": "asleep"}
        assert (await h.client.post("/wake_up")).status == 200
        mark = len(cp.calls)
        await until(lambda: len(heartbeats_since(mark)) >= 2, "two heartbeats awake")
        assert heartbeats_since(mark)[-1] == {"instance_id": "i-1"}
        await registrar.stop()
    assert "admission_state" not in cp.calls[0][1]


async def test_proxy_down_at_start_is_retried_until_it_comes_up(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=sim_registration.__name__)
    port = free_port()
    registrar = Registrar(registration(f"http://127.0.0.1:{port}"))
    await registrar.start()
    await until(lambda: sum("register to" in r.getMessage() for r in caplog.records) >= 2,
                "two refused attempts")
    assert not registrar.registered
    cp = ControlPlane()
    async with control_plane(cp, port=port):
        await until(lambda: "heartbeat" in cp.verbs(), "registered and heartbeating")
        await registrar.stop()
    assert cp.verbs()[0] == "register"
    assert cp.verbs()[-1] == "deregister"


async def test_cli_serves_registers_and_deregisters_on_sigterm() -> None:
    cp = ControlPlane()
    port = free_port()
    async with control_plane(cp) as url:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "deploy.demo.engine_sim", "--listen", f"127.0.0.1:{port}",
            "--model", MODEL, "--max-running", "2", "--max-waiting", "4",
            "--tokens-per-second", "1000", "--prefill-ms-per-token", "0",
            "--register-url", url, "--instance-id", "i-cli", "--heartbeat-interval", "0.05",
            "--capacity", "2", "--seed", "3",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            await until(lambda: "heartbeat" in cp.verbs(), "CLI engine registered", 30.0)
            base = f"http://127.0.0.1:{port}"
            async with aiohttp.ClientSession() as session:
                async with session.post(f"{base}/v1/chat/completions", json={
                        "messages": [{"content": "hi"}], "max_tokens": 2}) as resp:
                    assert resp.status == 200
                async with session.get(f"{base}/metrics") as resp:
                    assert "vllm:request_success_total" in await resp.text()
            proc.send_signal(signal.SIGTERM)
            out, err = await asyncio.wait_for(proc.communicate(), 30.0)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    assert proc.returncode == 0, err.decode()
    assert f"http://127.0.0.1:{port}" in out.decode()
    assert cp.calls[0] == ("register", {"instance_id": "i-cli",
                                        "url": f"http://127.0.0.1:{port}", "capacity": 2})
    assert cp.verbs()[-1] == "deregister"


@pytest.mark.parametrize("argv", [
    ["--max-running", "0"],
    ["--listen", "nohost"],
    ["--register-url", "http://127.0.0.1:1"],
    ["--max-waiting", "-1"],
])
def test_bad_flags_exit_2_with_one_line(argv: list[str],
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert engine_sim.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("engine_sim: error:")


def _sleep_states(m: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[str, float]:
    return {labels[0][1]: v for (name, labels), v in m.items()
            if name == "vllm:engine_sleep_state"}


async def test_sleep_mode_as_vllm_publishes_it_and_refuses_requests_while_asleep() -> None:
    async with engine() as h:
        assert _sleep_states(await h.scrape()) == {
            "awake": 1.0, "weights_offloaded": 0.0, "discard_all": 0.0}
        for level, state in (("1", "weights_offloaded"), ("2", "discard_all")):
            assert (await h.client.post(f"/sleep?level={level}")).status == 200
            assert await (await h.client.get("/is_sleeping")).json() == {"is_sleeping": True}
            m = await h.scrape()
            assert _sleep_states(m) == {"awake": 0.0, "weights_offloaded": 0.0,
                                        "discard_all": 0.0, state: 1.0}
            assert await h.load_is(running=0, waiting=0)
            status, _ = await h.chat()
            assert status == 503
        assert (await h.client.post("/sleep?level=3")).status == 400
        assert (await h.client.post("/wake_up")).status == 200
        assert await (await h.client.get("/is_sleeping")).json() == {"is_sleeping": False}
        assert _sleep_states(await h.scrape())["awake"] == 1.0
