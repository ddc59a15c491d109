"""Forward one chat completion to an Instance and relay the answer.

Streaming answers are passed through chunk by chunk (the engine's SSE lines,
`data: [DONE]` included) so the client sees tokens as the engine emits them;
non-streaming answers are relayed whole. The outcome is set on the dispatch
from what actually happened: the engine's status (429/503 mean it refused the
request, other errors are errors), a broken upstream connection (error), or a
client that went away while we wrote to it (cancelled).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import aiohttp
from aiohttp import web

from poolscope.exporters.proxy import Dispatch
from poolscope.exporters.proxy.dispatch import Outcome

CHAT_PATH = "/v1/chat/completions"
REFUSED = frozenset({429, 503})


class _ClientGone(Exception):
    """Writing to the client failed: it disconnected."""


def outcome_for_status(status: int) -> Outcome:
    if status < 400:
        return "ok"
    return "rejected" if status in REFUSED else "error"


def error_response(status: int, message: str, kind: str) -> web.Response:
    """An OpenAI-style error body."""
    return web.json_response({"error": {"message": message, "type": kind, "code": status}},
                             status=status)


async def forward(session: aiohttp.ClientSession, request: web.Request, base_url: str,
                  body: dict[str, Any], dispatch: Dispatch) -> web.StreamResponse:
    """Send `body` to the Instance at `base_url`; returns the response for the client."""
    relay: web.StreamResponse | None = None
    try:
        async with session.post(base_url.rstrip("/") + CHAT_PATH, json=body) as upstream:
            dispatch.outcome = outcome_for_status(upstream.status)
            if upstream.status >= 400 or not body.get("stream"):
                return web.Response(status=upstream.status, body=await upstream.read(),
                                    content_type=upstream.content_type)
            relay = web.StreamResponse(status=upstream.status, headers={
                "Content-Type": upstream.headers.get("Content-Type", "text/event-stream"),
                "Cache-Control": "no-cache"})
            await _to_client(relay.prepare(request))
            async for chunk in upstream.content.iter_any():
                await _to_client(relay.write(chunk))
            await _to_client(relay.write_eof())
            return relay
    except _ClientGone:
        dispatch.outcome = "cancelled"
        assert relay is not None
        return relay
    except TimeoutError:
        dispatch.outcome = "timeout"
        return _failed(relay, 504, "the Instance did not answer in time")
    except aiohttp.ClientError as e:
        dispatch.outcome = "error"
        return _failed(relay, 502, f"the Instance failed: {e.__class__.__name__}: {e}")


async def _to_client(write: Awaitable[object]) -> None:
    try:
        await write
    except ConnectionError as e:
        raise _ClientGone from e


def _failed(relay: web.StreamResponse | None, status: int, message: str) -> web.StreamResponse:
    """An error answer, unless the stream already began: then it just ends short."""
    if relay is not None and relay.prepared:
        return relay
    return error_response(status, message, "upstream_error")
