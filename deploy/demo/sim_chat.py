"""The simulated engine's POST /v1/chat/completions, OpenAI-style as vLLM serves it.

A malformed request gets 400 in OpenAI's error envelope; a request is
refused while the engine sleeps or when batch and queue are full (503), else held
in the scheduler for its prefill and decode time; the answer is words drawn from a
small vocabulary, whole or streamed as server-sent events, with the usage counts
OpenAI clients read. The tokens are counted, not real: the simulator has no model.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from typing import Any

from aiohttp import web

from deploy.demo.sim_metrics import SleepMode
from deploy.demo.sim_scheduler import EngineConfig, QueueFull, Scheduler, SimRequest, Ticket

log = logging.getLogger("engine_sim")

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


def error(status: int, message: str, kind: str) -> web.Response:
    """OpenAI's error envelope, which OpenAI clients and the demo Proxy understand."""
    return web.json_response(
        {"error": {"message": message, "type": kind, "param": None, "code": status}},
        status=status)


def _usage(req: SimRequest) -> dict[str, int]:
    return {"prompt_tokens": req.prompt_tokens, "completion_tokens": req.output_tokens,
            "total_tokens": req.prompt_tokens + req.output_tokens}


class ChatCompletions:
    """One engine's chat completions route, over its scheduler and its sleep mode."""

    def __init__(self, config: EngineConfig, scheduler: Scheduler, sleep: SleepMode,
                 seed: int | None = None) -> None:
        self.config = config
        self.scheduler = scheduler
        self.sleep = sleep
        self._words = random.Random(seed)

    def _text(self, tokens: int) -> str:
        return "".join(self._words.choice(_VOCABULARY) + " " for _ in range(tokens))

    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return error(400, "request body is not valid JSON", "BadRequestError")
        try:
            messages, max_tokens, stream, include_usage = _parse_chat_request(body)
        except BadRequest as e:
            return error(400, str(e), "BadRequestError")
        if self.sleep.level:
            return error(503, "the engine is sleeping: POST /wake_up first",
                         "ServiceUnavailableError")
        prompt_tokens = estimate_prompt_tokens(messages)
        try:
            ticket = self.scheduler.admit(prompt_tokens, max_tokens)
        except QueueFull as e:
            return error(503, f"engine overloaded: {e}", "ServiceUnavailableError")
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
