"""One GET of another process's /metrics page, failures named in the health vocabulary.

The Instance exporter reads its engine's page and the gateway adapter its
gateway's the same way: a non-200 answer, a timeout, a refused connection or a
page that is not UTF-8 is a failed sample with its reason, never an empty page.
"""

from __future__ import annotations

import aiohttp

from exporters.common.health import ErrorReason
from exporters.common.sampling import SampleError

FETCH_REASONS = (ErrorReason.TIMEOUT, ErrorReason.CONNECTION, ErrorReason.HTTP_STATUS,
                 ErrorReason.PARSE)


async def fetch_text(session: aiohttp.ClientSession, url: str) -> str:
    """The page at `url` as text; raises SampleError."""
    try:
        async with session.get(url) as resp:
            if resp.status != 200:
                raise SampleError(ErrorReason.HTTP_STATUS, f"HTTP {resp.status}")
            body = await resp.read()
    except TimeoutError as e:
        raise SampleError(ErrorReason.TIMEOUT, f"{url}: no answer in time") from e
    except aiohttp.ClientError as e:
        raise SampleError(ErrorReason.CONNECTION, f"{url}: {e}") from e
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SampleError(ErrorReason.PARSE, f"not UTF-8 text: {e}") from e
