"""A typed client for the Scheduler: one snapshot of every pool per scheduling cycle.

Fetch once per cycle and decide on that one object: every pool in it was evaluated
at the same instant, so comparing pools within it is meaningful; mixing two
snapshots is not. `None` means "not measured" and must never be read as zero, and
`stale` says the bridge could not reach Prometheus and is replaying the past.
This module only parses; it makes no decision with the values.

The bridge renders one body per snapshot: the client sends back the ETag of the last
one it parsed and accepts gzip, so a request within an evaluation interval costs a
304 of a few hundred bytes and no parsing (the parsed snapshot is reused), and a new
snapshot about a tenth of its JSON. The snapshot's age changes with every request, so
it comes in headers (`X-Poolscope-Age-S`), not in the body.

The sections' dataclasses are rendered from poolscope.contract.fields into
client_fields.py, written out rather than built at import so that a Scheduler's type
checker sees every field (a test fails when they drift). Fields the bridge adds later
are ignored; fields missing from an older bridge are None.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar

import aiohttp

from poolscope.scheduler_bridge.client_fields import (
    GpuCapacity,
    Health,
    Instances,
    Load,
    MetricQuality,
    MetricSource,
    Utilization,
)

SNAPSHOT_ROUTE = "/debug/proxy_pool_resources"


@dataclass(frozen=True)
class PoolSummary:
    schema_version: int
    proxy_id: str
    generated_at: float
    metric_source: MetricSource
    metric_quality: MetricQuality
    instances: Instances
    load: Load
    utilization: Utilization
    health: Health
    # By gpu_model; None when the bridge knows nothing of the pool's GPUs (or predates
    # the field), never {} (see poolscope.contract.fields.GPUS_SECTION).
    gpus: dict[str, GpuCapacity] | None = None


@dataclass(frozen=True)
class BridgeSnapshot:
    generated_at: float
    stale: bool
    age_s: float | None  # None when the bridge does not say; from its headers
    pools: dict[str, PoolSummary]
    # When the rules wrote the rollups, by Prometheus' clock; None from an older bridge.
    rollups_at: float | None = None


class BridgeError(Exception):
    """No snapshot from the bridge: the one exception a Scheduler catches.

    `status` is the HTTP status of a refusal (503: it knows nothing recent enough; an
    ingress in front may answer with HTML, kept as text in `body`), or None when no
    answer came (refused connection, timeout, a body that is not the summary)."""

    def __init__(self, status: int | None, body: Any) -> None:
        message = body.get("error") if isinstance(body, dict) else body
        super().__init__(f"HTTP {status}: {message}" if status is not None else str(message))
        self.status = status
        self.body = body


class BridgeUnreachable(BridgeError):
    """No answer came: the connection was refused or reset, or it timed out."""

    def __init__(self, url: str, cause: BaseException) -> None:
        super().__init__(None, f"{url}: {cause.__class__.__name__}: {cause}")
        self.cause = cause


_Section = TypeVar("_Section")


def _section(cls: type[_Section], doc: Any) -> _Section:
    if not isinstance(doc, dict):
        return cls()
    return cls(**{f.name: doc[f.name] for f in fields(cls)  # type: ignore[arg-type]
                  if f.name in doc})


def parse_pool(doc: dict[str, Any]) -> PoolSummary:
    return PoolSummary(
        schema_version=int(doc["schema_version"]),
        proxy_id=str(doc["proxy_id"]),
        generated_at=float(doc["generated_at"]),
        metric_source=_section(MetricSource, doc.get("metric_source")),
        metric_quality=_section(MetricQuality, doc.get("metric_quality")),
        instances=_section(Instances, doc.get("instances")),
        load=_section(Load, doc.get("load")),
        utilization=_section(Utilization, doc.get("utilization")),
        health=_section(Health, doc.get("health")),
        gpus=_gpus(doc.get("gpus")),
    )


def _gpus(doc: Any) -> dict[str, GpuCapacity] | None:
    if not isinstance(doc, dict):
        return None
    return {str(model): _section(GpuCapacity, entry) for model, entry in doc.items()}


def parse_snapshot(doc: dict[str, Any], age_s: float | None = None) -> BridgeSnapshot:
    """The body of GET /debug/proxy_pool_resources, `age_s` from its headers (a bridge
    from before 2026-12 wrote it in the body)."""
    if age_s is None and doc.get("age_s") is not None:
        age_s = float(doc["age_s"])
    rollups_at = doc.get("rollups_at")
    return BridgeSnapshot(
        generated_at=float(doc["generated_at"]),
        stale=bool(doc.get("stale", False)),
        age_s=age_s,
        pools={pid: parse_pool(pool) for pid, pool in doc["pools"].items()},
        rollups_at=None if rollups_at is None else float(rollups_at),
    )


def age_from(headers: Mapping[str, str]) -> float | None:
    """The snapshot's age an answer states: to the millisecond, else HTTP's Age."""
    for name in ("X-Poolscope-Age-S", "Age"):
        value = headers.get(name)
        if value is not None:
            try:
                return float(value)
            except ValueError:
                continue
    return None


class SchedulerBridgeClient:
    """Reads the Scheduler bridge; the caller owns the aiohttp session. Keeps the last
    snapshot it parsed, to reuse it when the bridge answers 304 Not Modified.

    It asks every time rather than trusting `Cache-Control: max-age`: a snapshot turns
    stale when the bridge loses its backends, and only asking tells that at once; the
    question costs a 304 when nothing changed."""

    def __init__(self, base_url: str, session: aiohttp.ClientSession, *,
                 token: str | None = None, timeout_s: float = 2.0) -> None:
        self._url = base_url.rstrip("/")
        self._session = session
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._last: tuple[str, BridgeSnapshot] | None = None  # (ETag, parsed)

    async def snapshot(self) -> BridgeSnapshot:
        """Every pool at one instant; raises BridgeError when there is none to be had."""
        headers = {**self._headers, "Accept-Encoding": "gzip"}
        if self._last is not None:
            headers["If-None-Match"] = self._last[0]
        url = f"{self._url}{SNAPSHOT_ROUTE}"
        try:
            async with self._session.get(url, headers=headers, timeout=self._timeout) as resp:
                age_s = age_from(resp.headers)
                if resp.status == 304 and self._last is not None:
                    # The same body: the same snapshot in the same staleness, only older.
                    return replace(self._last[1], age_s=age_s)
                body = await _body(resp)
                snapshot = parse_snapshot(body, age_s)
                etag = resp.headers.get("ETag")
                self._last = None if etag is None else (etag, snapshot)
                return snapshot
        except (aiohttp.ClientError, TimeoutError) as e:
            raise BridgeUnreachable(url, e) from e
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            raise BridgeError(None, f"{url}: not a pool snapshot: {e!r}") from e

    async def get(self, path: str) -> Any:
        """The JSON document at `path`; raises BridgeError when there is none."""
        url = f"{self._url}{path}"
        try:
            async with self._session.get(url, headers=self._headers,
                                         timeout=self._timeout) as resp:
                return await _body(resp)
        except (aiohttp.ClientError, TimeoutError) as e:
            raise BridgeUnreachable(url, e) from e


async def _body(resp: aiohttp.ClientResponse) -> Any:
    """A 200's JSON; BridgeError for any other status, whatever its body (an ingress's
    error page is HTML) or for a 200 whose body is not JSON."""
    text = await resp.text(errors="replace")  # an error page in any charset is kept
    try:
        body = json.loads(text)
    except ValueError:
        raise BridgeError(None if resp.status == 200 else resp.status,
                          f"not JSON: {text[:200]!r}") from None
    if resp.status != 200:
        raise BridgeError(resp.status, body)
    return body
