"""The middlewares every service's application runs, so every service answers alike.

Every error is JSON with a cause (aiohttp's own 404 and 405 included), a request
body is refused unread (no endpoint takes one), credentials are checked before
anything else reads the request (`service.auth`), a web config's response headers
go on every answer, and `timing` observes each answer by route template, never by
raw path, so a client cannot mint label values.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import Histogram

from poolscope.service.auth import Access, Handler, access_control


def json_error(status: int, message: str, **extra: Any) -> web.Response:
    """An error a client can log as is: the cause, and whatever identifies the case."""
    return web.json_response({"error": message, **extra}, status=status)


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """aiohttp's own 404/405 become JSON like every other error of these APIs."""
    try:
        return await handler(request)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        return json_error(e.status, e.reason)


@web.middleware
async def no_body(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every endpoint is a GET without a body; one that comes anyway is not read."""
    if request.body_exists:
        return json_error(413, "this API takes no request body")
    return await handler(request)


def response_headers(headers: Mapping[str, str]) -> Middleware:
    """The headers a web config sets (HSTS, X-Frame-Options, ...) on every answer."""
    @web.middleware
    async def add(request: web.Request, handler: Handler) -> web.StreamResponse:
        response = await handler(request)
        response.headers.update(headers)
        return response
    return add


def guarded(access: Access | None, headers: Mapping[str, str] | None = None) -> list[Middleware]:
    """The middlewares every service runs, outermost first: the web config's response
    headers, JSON errors, access control when credentials are configured (before
    anything else reads the request, so every answer to a client without them closes
    the connection), no bodies."""
    return [*([response_headers(headers)] if headers else []), json_errors,
            *([access_control(access, json_error)] if access and access.required else []),
            no_body]


def timing(histogram: Histogram) -> Middleware:
    """Observe every answer in `histogram`, labelled (route, status)."""
    @web.middleware
    async def timed(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as e:
            status = e.status
            raise
        finally:
            # The route template, never the raw path: a client cannot mint label values.
            route = request.match_info.route.resource
            name = route.canonical if route is not None else "unmatched"
            histogram.labels(name, str(status)).observe(time.perf_counter() - started)
    return timed
