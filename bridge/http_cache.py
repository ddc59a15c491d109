"""Answers rendered once per snapshot: the body, its gzip, its ETag, and the HTTP that
lets a client skip both (304) or the bytes (gzip).

A snapshot changes once per evaluation of the rules, while a fleet of Schedulers asks
every second: serialising and sending the same megabyte anew each time was most of
what the bridge did. So every route that answers from the snapshot renders its body
once per snapshot, staleness and key (the pool, the page), keeps it with the snapshot
(`PoolSnapshot.renders`, freed with it), compresses it once when first asked for gzip,
and answers a client that already holds it with 304 Not Modified.

What changes between two requests for the same body is only how old it is: that goes
in headers (`Age`, `X-Poolscope-Age-S`), never in the body, or no body could be kept.
A snapshot served stale is another body with another ETag (its envelope says stale;
a one-pool body does not, so the tag must), marked `X-Poolscope-Stale: true` and
`Cache-Control: no-cache`. A fresh one may be kept until the rules are next due to
write: `max-age` counts from the same origin as `Age` (the rollups' writing), so that
a cache that honours both, as RFC 9111 section 4.2.3 computes, drops it then.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import re
import secrets
import zlib
from collections.abc import Awaitable, Callable, Hashable, Mapping

from aiohttp import web

from poolscope.bridge.cache import Served

JSON = "application/json"
HTML = "text/html; charset=utf-8"
# zlib's default. On the all-pools JSON at 1,000 pools (1.1 MiB): 8.5x smaller in 18 ms;
# level 9 saves 1% more for 1.5x the CPU, level 1 sends 40% more bytes.
GZIP_LEVEL = 6
# Larger bodies are compressed in a thread (zlib lets go of the GIL): at 10,000 pools
# one compression takes over 100 ms that the event loop would otherwise stand still.
INLINE_GZIP_BYTES = 64 * 1024
# Tags are unique to this process: a restarted bridge never matches a tag it did not
# give, even when its serials start again from 1.
_BOOT = secrets.token_hex(4)
_SERIAL = itertools.count(1)
_ENTITY_TAG = re.compile(r'(?:W/)?"([^"]*)"')


class Rendered:
    """One body as served: its bytes, its type, its tag, and its gzip once asked for."""

    __slots__ = ("_gzip", "body", "content_type", "etag", "gzip_etag", "kept")

    def __init__(self, body: bytes, content_type: str, kept: bool = True) -> None:
        self.body = body
        # False for a body with a part missing: the next request draws it again, so
        # no one may keep it for max-age.
        self.kept = kept
        self.content_type = content_type
        tag = f"{_BOOT}-{next(_SERIAL)}"
        # Another coding is another representation: a strong tag names the bytes.
        self.etag, self.gzip_etag = f'"{tag}"', f'"{tag}-gzip"'
        self._gzip: asyncio.Future[bytes] | None = None

    def gzipped(self) -> Awaitable[bytes]:
        """The body compressed, once: every request asking meanwhile awaits the same."""
        if self._gzip is None:
            if len(self.body) <= INLINE_GZIP_BYTES:
                self._gzip = asyncio.get_running_loop().create_future()
                self._gzip.set_result(_compress(self.body))
            else:
                self._gzip = asyncio.ensure_future(asyncio.to_thread(_compress, self.body))
        # shield: a client hanging up must not cancel the compression others await.
        return asyncio.shield(self._gzip)

    def matches(self, if_none_match: str) -> bool:
        """Whether If-None-Match names this body in either coding; weak comparison,
        as RFC 9110 section 13.1.2 asks of that header."""
        if if_none_match.strip() == "*":
            return True
        opaque = {self.etag[1:-1], self.gzip_etag[1:-1]}
        return any(m.group(1) in opaque for m in _ENTITY_TAG.finditer(if_none_match))


def _compress(body: bytes) -> bytes:
    packer = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS)  # gzip wrapper
    return packer.compress(body) + packer.flush()


def rendered(served: Served, key: Hashable, render: Callable[[], bytes],
             content_type: str = JSON) -> Rendered:
    """The body for `key` from the served snapshot in its staleness, rendered on the
    first request only."""
    return _kept(served, key) or _keep(served, key, render(), content_type)


async def rendered_whole(served: Served, key: Hashable,
                         render: Callable[[], Awaitable[tuple[bytes, bool]]],
                         content_type: str) -> Rendered:
    """Like `rendered`, for a body that also reads beyond the snapshot (a page's trends):
    `render` says whether every part of it could be read, and only such a body is kept;
    one with a part missing is rendered again by the next request, which may read it."""
    found = _kept(served, key)
    if found is not None:
        return found
    body, whole = await render()
    if whole:
        return _keep(served, key, body, content_type)
    return Rendered(body, content_type, kept=False)


def _kept(served: Served, key: Hashable) -> Rendered | None:
    found: Rendered | None = served.snapshot.renders.get((key, served.stale))
    return found


def _keep(served: Served, key: Hashable, body: bytes, content_type: str) -> Rendered:
    made = served.snapshot.renders[(key, served.stale)] = Rendered(body, content_type)
    return made


async def answer(request: web.Request, served: Served, body: Rendered,
                 headers: Mapping[str, str] | None = None) -> web.Response:
    """`body` as this request can take it: 304 when its If-None-Match names it, gzip
    when its Accept-Encoding allows, with how old it is and how long it stays current,
    besides `headers`."""
    headers = {**(headers or {}), **freshness_headers(served)}
    if not body.kept:
        headers["Cache-Control"] = "no-cache"
    headers["Vary"] = "Accept-Encoding"
    gzip = accepts_gzip(request.headers.get("Accept-Encoding", ""))
    headers["ETag"] = body.gzip_etag if gzip else body.etag
    if body.matches(request.headers.get("If-None-Match", "")):
        return web.Response(status=304, headers=headers)
    headers["Content-Type"] = body.content_type
    if not gzip:
        return web.Response(body=body.body, headers=headers)
    headers["Content-Encoding"] = "gzip"
    return web.Response(body=await body.gzipped(), headers=headers)


def freshness_headers(served: Served) -> dict[str, str]:
    """How old an answer is and how long it stays current, outside its body."""
    age = int(served.age_s)
    return {"Age": str(age), "X-Poolscope-Age-S": f"{served.age_s:.3f}",
            "X-Poolscope-Stale": "true" if served.stale else "false",
            "X-Poolscope-Generated-At": f"{served.snapshot.generated_at:.3f}",
            "Cache-Control": ("no-cache" if served.stale
                              else f"max-age={age + math.floor(served.current_for_s)}")}


def accepts_gzip(accept_encoding: str) -> bool:
    """Whether gzip is acceptable (RFC 9110 section 12.5.3): named with a q above 0,
    or not named and `*` is."""
    weights: dict[str, float] = {}
    for item in accept_encoding.split(","):
        coding, _, params = item.strip().partition(";")
        q = 1.0
        for param in params.split(";"):
            name, _, value = param.strip().partition("=")
            if name.lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        weights[coding.strip().lower()] = q
    for coding in ("gzip", "x-gzip", "*"):
        if coding in weights:
            return weights[coding] > 0
    return False
