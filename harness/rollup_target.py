"""A scrape target that serves `proxy_pool:*` series directly (colons are legal in
metric names), so a real Prometheus holds exactly the rollups a caller chooses without
depending on the recording rules. The Scheduler bridge benchmark stores 34,000 of
them this way; its integration test stores a handful."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from itertools import groupby

from aiohttp import web

from harness.prometheus import free_port

# One series: its labels (`__name__` included) and Prometheus' string form of its value.
Series = tuple[dict[str, str], str]


def series(name: str, proxy_id: str | None, value: str, source: str | None = "test",
           **labels: str) -> Series:
    """One series; value is Prometheus' string form ("NaN", "0")."""
    metric = {"__name__": name, **labels}
    if proxy_id is not None:
        metric["proxy_id"] = proxy_id
    if source is not None:
        metric["source"] = source
    return metric, value


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def exposition(vector: Sequence[Series]) -> bytes:
    """Prometheus text format, one untyped family per rollup name."""
    lines: list[str] = []
    ordered = sorted(vector, key=lambda s: s[0]["__name__"])
    for name, family in groupby(ordered, key=lambda s: s[0]["__name__"]):
        lines.append(f"# TYPE {name} untyped")
        for metric, value in family:
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in metric.items()
                              if k != "__name__")
            lines.append(f"{name}{{{labels}}} {value}")
    return ("\n".join(lines) + "\n").encode()


@asynccontextmanager
async def rollup_target(vector: Sequence[Series]) -> AsyncIterator[str]:
    """Serve `vector` on /metrics on a free loopback port; yields host:port."""
    body = exposition(vector)

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="text/plain", charset="utf-8")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await runner.cleanup()
