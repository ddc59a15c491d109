"""One GET of another process's /metrics page, failures named in the health vocabulary.

The Instance exporter reads its engine's page and the gateway adapter its
gateway's the same way: a non-200 answer, a timeout, a refused connection or a
page that is not UTF-8 is a failed sample with its reason, never an empty page.
A non-200 answer's failure names the URL and quotes the start of its body, so
the log says which document failed and what the server said.

The page is another program's output, so what is read is bounded: at most
MAX_PAGE_BYTES after decompression (an endless body or a gzip bomb stops there,
`too_large`), and a redirect is not followed (its target is not the engine
this exporter was told to read: `http_status`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import aiohttp

from poolscope.exporters.common.health import ErrorReason
from poolscope.exporters.common.sampling import SampleError

FETCH_REASONS = (ErrorReason.TIMEOUT, ErrorReason.CONNECTION, ErrorReason.HTTP_STATUS,
                 ErrorReason.PARSE, ErrorReason.TOO_LARGE)
# vLLM's page with every histogram and a few LoRA adapters is under 1 MiB.
MAX_PAGE_BYTES = 16 * 2**20
_CHUNK = 64 * 2**10
# How much of an error answer its failure quotes.
_EXCERPT_BYTES = 1024
_EXCERPT_CHARS = 200


async def fetch_text(session: aiohttp.ClientSession, url: str,
                     limit: int = MAX_PAGE_BYTES) -> str:
    """The page at `url` as text; raises SampleError."""
    try:
        async with session.get(url, allow_redirects=False) as resp:
            if resp.status != 200:
                where = resp.headers.get("Location")
                raise SampleError(ErrorReason.HTTP_STATUS, f"{url}: HTTP {resp.status}" + (
                    f" to {where[:200]} (redirects are not followed)" if where
                    else await _excerpt(resp)))
            body = await _bounded_body(resp, url, limit)
    except TimeoutError as e:
        raise SampleError(ErrorReason.TIMEOUT, f"{url}: no answer in time") from e
    except aiohttp.ClientError as e:
        raise SampleError(ErrorReason.CONNECTION, f"{url}: {e}") from e
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SampleError(ErrorReason.PARSE, f"not UTF-8 text: {e}") from e


async def fetch_before(deadline: float, fetch: Callable[[str], Awaitable[str]], url: str) -> str:
    """`fetch(url)` by `deadline` (the event loop's clock), so that several reads of one
    sample share one timeout; a late answer is a TIMEOUT naming the URL."""
    try:
        async with asyncio.timeout_at(deadline):
            return await fetch(url)
    except TimeoutError as e:
        raise SampleError(ErrorReason.TIMEOUT, f"{url}: no answer in time") from e


async def _bounded_body(resp: aiohttp.ClientResponse, url: str, limit: int) -> bytes:
    """The body, decompressed, refused once past `limit` (or at once when its
    declared length already is)."""
    declared = resp.content_length  # None: not declared, only what arrives counts
    if declared is not None and declared > limit:
        raise _too_large(url, limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_chunked(_CHUNK):
        size += len(chunk)
        if size > limit:
            raise _too_large(url, limit)
        chunks.append(chunk)
    return b"".join(chunks)


async def _excerpt(resp: aiohttp.ClientResponse) -> str:
    """The start of an error answer, on one line: what the server says went wrong
    (llama.cpp's router: "model name is missing from the request")."""
    try:
        head = await resp.content.read(_EXCERPT_BYTES)
    except aiohttp.ClientError:
        return ""  # the status alone is the failure; a broken body does not change it
    text = " ".join(head.decode("utf-8", "replace").split())[:_EXCERPT_CHARS]
    return f": {text}" if text else ""


def _too_large(url: str, limit: int) -> SampleError:
    return SampleError(ErrorReason.TOO_LARGE, f"{url}: page larger than {limit} bytes")
