"""A simulated LLM engine: vLLM's HTTP surface and metrics, without a GPU.

It stands in for vLLM in the demo cluster and in tests, so that everything
downstream (Instance exporter, Proxy, Prometheus rules) meets a load that
behaves like a real engine's: a bounded batch, a FIFO waiting queue, prefill
and decode time, and vLLM v1's /metrics under their real names. Not product code.

    python -m deploy.demo.engine_sim --listen 127.0.0.1:8001 --model demo \\
        --max-running 4 --max-waiting 16 --tokens-per-second 50 \\
        --prefill-ms-per-token 0.5 \\
        [--register-url http://127.0.0.1:9000 --instance-id i-1 \\
         --heartbeat-interval 2 --capacity 4] [--seed 1]

HTTP: POST /v1/chat/completions (OpenAI-style, `stream` supported; 503 when
batch and queue are full), GET /metrics, GET /health, and for tests
GET|POST /admin/fault {"mode": "none"|"hang"|"error500"|"garbage"}, which
changes how /metrics answers, and vLLM's sleep mode endpoints: POST /sleep?level=1|2,
POST /wake_up, GET /is_sleeping. Asleep, it refuses requests (503) and its /metrics
says so in `vllm:engine_sleep_state`, beside the zeros an idle engine reads; its
heartbeats tell its Proxy too (admission_state "asleep").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import random
import signal
import sys
import time
from dataclasses import replace
from typing import Any

from aiohttp import web
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from deploy.demo.sim_metrics import SleepMode, metrics_registry, render
from deploy.demo.sim_registration import Registrar, RegistrationConfig
from deploy.demo.sim_scheduler import (
    Clock,
    EngineConfig,
    QueueFull,
    Scheduler,
    SimRequest,
    Ticket,
)
from poolscope.exporters.instance.admission import AdmissionState
from poolscope.service.argtypes import (
    OneLineErrorParser,
    host_port,
    identifier,
    positive_float,
    positive_int,
)

log = logging.getLogger("engine_sim")

FAULT_MODES = ("none", "hang", "error500", "garbage")
# Looks like exposition text but is not: an unterminated label set, a value
# that is not a number, and a sample without a value.
GARBAGE_METRICS = (
    b'# TYPE vllm:num_requests_running gauge\n'
    b'vllm:num_requests_running{engine="0",model_name="\n'
    b'vllm:num_requests_waiting twelve\n'
    b'vllm:kv_cache_usage_perc{engine="0"}\n'
)
_VOCABULARY = ("the", "pool", "is", "warm", "and", "every", "token", "counts", "queue",
               "load", "batch", "cache", "measured", "ready", "proxy", "engine")


def estimate_prompt_tokens(messages: list[dict[str, Any]]) -> int:
    """About four characters per token, the usual rule of thumb for English text.

    The simulator has no tokenizer; it needs a prompt length that grows with
    the prompt, not an exact one.
    """
    chars = 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            chars += sum(len(p.get("text", "")) for p in content if isinstance(p, dict))
    return max(1, math.ceil(chars / 4))


class BadRequest(ValueError):
    pass


def _parse_chat_request(body: Any) -> tuple[list[dict[str, Any]], int | None, bool, bool]:
    """(messages, max_tokens, stream, include_usage) from a chat completion body."""
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(
            isinstance(m, dict) for m in messages):
        raise BadRequest("'messages' must be a non-empty list of objects")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and (
            isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise BadRequest("'max_tokens' must be a positive integer")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest("'stream' must be a boolean")
    options = body.get("stream_options") or {}
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    return messages, max_tokens, stream, include_usage


def _error(status: int, message: str, kind: str) -> web.Response:
    """OpenAI's error envelope, which OpenAI clients and the demo Proxy understand."""
    return web.json_response(
        {"error": {"message": message, "type": kind, "param": None, "code": status}},
        status=status)


class FaultSwitch:
    """How /metrics misbehaves, switchable at run time so tests can break a live engine."""

    def __init__(self) -> None:
        self.mode = "none"
        self._changed = asyncio.Event()

    def set(self, mode: str) -> None:
        if mode not in FAULT_MODES:
            raise ValueError(f"unknown fault mode {mode!r}; expected one of {FAULT_MODES}")
        self.mode = mode
        # Wake every hung scrape; each re-checks the mode it now finds.
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_while_hanging(self) -> None:
        while self.mode == "hang":
            await self._changed.wait()


class SimulatedEngine:
    """One engine replica: its scheduler, its metrics registry, its HTTP app."""

    def __init__(self, config: EngineConfig, clock: Clock | None = None,
                 seed: int | None = None) -> None:
        self.config = config
        self.scheduler = Scheduler(config, clock)
        self.sleep = SleepMode()
        self.registry = metrics_registry(self.scheduler, self.sleep)
        self.faults = FaultSwitch()
        self._words = random.Random(seed)
        self.app = web.Application()
        self.app.add_routes([
            web.post("/v1/chat/completions", self._chat_completions),
            web.get("/metrics", self._metrics),
            web.get("/health", self._health),
            web.get("/admin/fault", self._get_fault),
            web.post("/admin/fault", self._set_fault),
            web.post("/sleep", self._sleep),
            web.post("/wake_up", self._wake_up),
            web.get("/is_sleeping", self._is_sleeping),
        ])

    def _text(self, tokens: int) -> str:
        return "".join(self._words.choice(_VOCABULARY) + " " for _ in range(tokens))

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error(400, "request body is not valid JSON", "BadRequestError")
        try:
            messages, max_tokens, stream, include_usage = _parse_chat_request(body)
        except BadRequest as e:
            return _error(400, str(e), "BadRequestError")
        if self.sleep.level:
            return _error(503, "the engine is sleeping: POST /wake_up first",
                          "ServiceUnavailableError")
        prompt_tokens = estimate_prompt_tokens(messages)
        try:
            ticket = self.scheduler.admit(prompt_tokens, max_tokens)
        except QueueFull as e:
            return _error(503, f"engine overloaded: {e}", "ServiceUnavailableError")
        async with ticket:
            if not stream:
                await ticket.run()
                return web.json_response(self._completion(ticket.request))
            return await self._stream(request, ticket, include_usage)

    def _completion(self, req: SimRequest) -> dict[str, Any]:
        return {
            "id": req.request_id, "object": "chat.completion", "created": int(time.time()),
            "model": self.config.model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": self._text(req.output_tokens)},
                "logprobs": None, "finish_reason": req.finish_reason,
            }],
            "usage": _usage(req),
        }

    async def _stream(self, request: web.Request, ticket: Ticket,
                      include_usage: bool) -> web.StreamResponse:
        req = ticket.request
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
        await resp.prepare(request)
        created = int(time.time())

        async def send(choices: list[dict[str, Any]], **extra: Any) -> None:
            chunk = {"id": req.request_id, "object": "chat.completion.chunk",
                     "created": created, "model": self.config.model,
                     "choices": choices, **extra}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())

        def choice(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            return {"index": 0, "delta": delta, "logprobs": None,
                    "finish_reason": finish_reason}

        async def tokens(n: int) -> None:
            await send([choice({"content": self._text(n)})])

        try:
            await send([choice({"role": "assistant", "content": ""})])
            await ticket.run(tokens)
            await send([choice({}, req.finish_reason)])
            if include_usage:
                await send([], usage=_usage(req))
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
        except ConnectionResetError:
            # The client left; leaving the ticket's `async with` frees the slot.
            log.debug("client disconnected from %s", req.request_id)
        return resp

    async def _metrics(self, request: web.Request) -> web.Response:
        await self.faults.wait_while_hanging()
        if self.faults.mode == "error500":
            return web.Response(status=500, text="injected fault: error500\n")
        if self.faults.mode == "garbage":
            return web.Response(body=GARBAGE_METRICS, content_type="text/plain")
        # The classic text format, which is what `render` writes and what every
        # Prometheus (and vLLM behind an older prometheus_client) speaks.
        return web.Response(body=render(self.registry),
                            headers={"Content-Type": CONTENT_TYPE_PLAIN_0_0_4})

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response()

    async def _get_fault(self, request: web.Request) -> web.Response:
        return web.json_response({"mode": self.faults.mode})

    async def _set_fault(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            self.faults.set(body["mode"])
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError) as e:
            return _error(400, f"expected {{\"mode\": one of {FAULT_MODES}}}: {e}",
                          "BadRequestError")
        return web.json_response({"mode": self.faults.mode})


    async def _sleep(self, request: web.Request) -> web.Response:
        """vLLM's level 1 offloads the weights, level 2 discards them too; both serve
        nothing until woken. Requests already admitted run to their end here."""
        level = request.query.get("level", "1")
        if level not in ("1", "2"):
            return _error(400, f"level must be 1 or 2, not {level!r}", "BadRequestError")
        self.sleep.level = int(level)
        return web.Response()

    async def _wake_up(self, request: web.Request) -> web.Response:
        self.sleep.level = 0
        return web.Response()

    async def _is_sleeping(self, request: web.Request) -> web.Response:
        return web.json_response({"is_sleeping": self.sleep.level > 0})

    def admission_state(self) -> str | None:
        """What the engine tells its Proxy of its admission: asleep while its sleep mode
        is on, else nothing (judging load is the Instance exporter's work)."""
        return AdmissionState.ASLEEP.value if self.sleep.level else None


def _usage(req: SimRequest) -> dict[str, int]:
    return {"prompt_tokens": req.prompt_tokens, "completion_tokens": req.output_tokens,
            "total_tokens": req.prompt_tokens + req.output_tokens}


async def start(engine: SimulatedEngine, host: str, port: int) -> tuple[web.AppRunner, str]:
    """Listen on host:port (0 picks a free port); returns the runner and the engine's URL.

    `handler_cancellation` makes a client disconnect cancel its handler, which
    is what frees the batch slot of a non-streaming request whose client left.
    A short shutdown timeout keeps a scrape hung by fault injection from
    delaying exit. Per-request access lines would drown the demo's logs.
    """
    access_log = logging.getLogger("aiohttp.access") if log.isEnabledFor(logging.DEBUG) else None
    runner = web.AppRunner(engine.app, handler_cancellation=True, shutdown_timeout=1.0,
                           access_log=access_log)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except BaseException:
        await runner.cleanup()
        raise
    bound_host, bound_port = runner.addresses[0][:2]
    advertised_host = "127.0.0.1" if bound_host in ("0.0.0.0", "::") else bound_host
    return runner, f"http://{advertised_host}:{bound_port}"


async def serve(engine: SimulatedEngine, host: str, port: int,
                registration: RegistrationConfig | None, stop: asyncio.Event) -> None:
    """Serve until `stop` is set; register once listening, deregister before closing.

    A registration's `engine_url` may be empty: it is then filled in with the
    address actually bound, which is how port 0 works.
    """
    runner, url = await start(engine, host, port)
    registrar: Registrar | None = None
    try:
        print(f"engine_sim: serving {url} model={engine.config.model}", flush=True)
        if registration is not None:
            if not registration.engine_url:
                registration = replace(registration, engine_url=url)
            registrar = Registrar(registration, engine.admission_state)
            await registrar.start()
        await stop.wait()
    finally:
        if registrar is not None:
            await registrar.stop()
        await runner.cleanup()


def build_parser() -> argparse.ArgumentParser:
    p = OneLineErrorParser(prog="engine_sim", description=__doc__.split("\n\n")[0])
    p.add_argument("--listen", type=host_port, default=("127.0.0.1", 8000),
                   help="HOST:PORT to serve on; port 0 picks a free one (default 127.0.0.1:8000)")
    p.add_argument("--model", default="sim-model", help="served model name (model_name label)")
    p.add_argument("--max-running", type=positive_int, default=8,
                   help="batch capacity: requests decoding at once")
    p.add_argument("--max-waiting", type=int, default=32,
                   help="waiting-queue bound; beyond it requests get 503")
    p.add_argument("--tokens-per-second", type=positive_float, default=50.0,
                   help="decode rate of each running request")
    p.add_argument("--prefill-ms-per-token", type=float, default=0.5,
                   help="prefill time per prompt token, milliseconds")
    p.add_argument("--kv-cache-tokens", type=positive_int, default=None,
                   help="KV cache size in tokens (default: max-running x 128, small enough "
                   "that the usage gauge visibly follows demo-sized requests)")
    p.add_argument("--default-output-tokens", type=positive_int, default=64,
                   help="output length of requests without max_tokens (finish reason 'stop')")
    p.add_argument("--register-url", help="demo Proxy control-plane base URL to register with")
    p.add_argument("--instance-id", type=identifier, help="instance id to register as")
    p.add_argument("--heartbeat-interval", type=positive_float, default=2.0,
                   help="seconds between heartbeats to the Proxy")
    p.add_argument("--capacity", type=positive_int, default=None,
                   help="capacity to advertise when registering (default: none)")
    p.add_argument("--advertise-url",
                   help="URL the Proxy should use for this engine (default: the bound address)")
    p.add_argument("--seed", type=int, default=None, help="seed for the generated text")
    p.add_argument("--log-level", default="INFO",
                   choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    if args.register_url and not args.instance_id:
        print("engine_sim: error: --register-url needs --instance-id", file=sys.stderr)
        return 2
    try:
        config = EngineConfig(
            model=args.model, max_running=args.max_running, max_waiting=args.max_waiting,
            tokens_per_second=args.tokens_per_second,
            prefill_ms_per_token=args.prefill_ms_per_token,
            kv_cache_tokens=args.kv_cache_tokens or args.max_running * 128,
            default_output_tokens=args.default_output_tokens)
    except ValueError as e:
        print(f"engine_sim: error: {e}", file=sys.stderr)
        return 2
    registration = None if not args.register_url else RegistrationConfig(
        control_plane_url=args.register_url, instance_id=args.instance_id,
        engine_url=args.advertise_url or "", capacity=args.capacity,
        heartbeat_interval=args.heartbeat_interval)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        engine = SimulatedEngine(config, seed=args.seed)
        await serve(engine, *args.listen, registration, stop)

    try:
        asyncio.run(run())
    except OSError as e:
        print(f"engine_sim: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
