"""A typed client for the Scheduler: one snapshot of every pool per scheduling cycle.

Fetch once per cycle and decide on that one object: every pool in it was evaluated
at the same instant, so comparing pools within it is meaningful; mixing two
snapshots is not. `None` means "not measured" and must never be read as zero, and
`stale` says the bridge could not reach Prometheus and is replaying the past.
This module only parses; it makes no decision with the values.

The sections' dataclasses are rendered from poolscope.bridge.fields into
client_fields.py, written out rather than built at import so that a Scheduler's type
checker sees every field (a test fails when they drift). Fields the bridge adds later
are ignored; fields missing from an older bridge are None.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
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
    # the field), never {} (see poolscope.bridge.fields.GPUS_SECTION).
    gpus: dict[str, GpuCapacity] | None = None


@dataclass(frozen=True)
class BridgeSnapshot:
    generated_at: float
    stale: bool
    age_s: float | None  # None when the bridge does not say
    pools: dict[str, PoolSummary]


class BridgeError(Exception):
    """The bridge answered with an error (503: it knows nothing recent enough)."""

    def __init__(self, status: int, body: Any) -> None:
        message = body.get("error") if isinstance(body, dict) else body
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.body = body


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


def parse_snapshot(doc: dict[str, Any]) -> BridgeSnapshot:
    """The body of GET /debug/proxy_pool_resources."""
    return BridgeSnapshot(
        generated_at=float(doc["generated_at"]),
        stale=bool(doc.get("stale", False)),
        age_s=None if doc.get("age_s") is None else float(doc["age_s"]),
        pools={pid: parse_pool(pool) for pid, pool in doc["pools"].items()},
    )


class SchedulerBridgeClient:
    """Reads the Scheduler bridge; the caller owns the aiohttp session."""

    def __init__(self, base_url: str, session: aiohttp.ClientSession, *,
                 token: str | None = None, timeout_s: float = 2.0) -> None:
        self._url = base_url.rstrip("/")
        self._session = session
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)

    async def snapshot(self) -> BridgeSnapshot:
        """Every pool at one instant; raises BridgeError when the bridge has none."""
        return parse_snapshot(await self.get("/debug/proxy_pool_resources"))

    async def get(self, path: str) -> Any:
        """The JSON document at `path`; raises BridgeError when the bridge refuses."""
        async with self._session.get(f"{self._url}{path}", headers=self._headers,
                                     timeout=self._timeout) as resp:
            body = await resp.json(content_type=None)
            if resp.status != 200:
                raise BridgeError(resp.status, body)
            return body
