"""Engine load, read from the engine's own /metrics endpoint.

Anything short of a clean page with finite, non-negative values fails the whole
sample: a replica whose numbers cannot be trusted must look unmeasured (series
absent, collector success 0, a reason), not idle.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import aiohttp
from prometheus_client.core import Metric

from exporters.common import catalog
from exporters.common.fetch import FETCH_REASONS, fetch_text
from exporters.common.health import ErrorReason
from exporters.common.identity import Identity
from exporters.common.promtext import PromTextError, first_prefix, select
from exporters.common.sampling import SampleError
from exporters.common.thresholds import KV_FULL, WAITING_Q
from exporters.instance.engines import DETECT_PREFIXES, MAPPINGS, EngineMapping

AUTO = "auto"


@dataclass(frozen=True)
class EngineSample:
    engine: str
    running: float | None
    waiting: float | None
    kv_cache_usage: float | None
    request_success: float | None
    prompt_tokens: float | None
    generation_tokens: float | None

    @property
    def source(self) -> str:
        return catalog.engine_source(self.engine)

    @property
    def saturation(self) -> float | None:
        """The engine scored as the Gateway API Inference Extension scores an endpoint:
        the worse of its queue against WAITING_Q and its KV cache against KV_FULL (1 is
        the healthy limit); one side alone when the other is not exposed (TGI has no
        KV figure), None when neither is."""
        terms = [v / limit for v, limit in ((self.waiting, WAITING_Q),
                                            (self.kv_cache_usage, KV_FULL)) if v is not None]
        return max(terms) if terms else None


_FIELDS: tuple[tuple[str, catalog.Family], ...] = (
    ("running", catalog.ENGINE_REQUESTS_RUNNING),
    ("waiting", catalog.ENGINE_REQUESTS_WAITING),
    ("kv_cache_usage", catalog.ENGINE_KV_CACHE_USAGE),
    ("request_success", catalog.ENGINE_REQUEST_SUCCESS),
    ("prompt_tokens", catalog.ENGINE_PROMPT_TOKENS),
    ("generation_tokens", catalog.ENGINE_GENERATION_TOKENS),
)


def _pick(found: dict[str, list[float]], candidates: tuple[str, ...]) -> list[float] | None:
    for name in candidates:
        if name in found:
            return found[name]
    return None


def _check(name: str, values: list[float], ratio: bool) -> None:
    for v in values:
        if not math.isfinite(v) or v < 0 or (ratio and v > 1):
            raise SampleError(ErrorReason.INVALID_VALUE, f"{name} = {v!r}")


def interpret(text: str, mapping: EngineMapping) -> EngineSample:
    """Turn one /metrics page into a sample using `mapping`; raises SampleError."""
    try:
        found = select(text, mapping.names())
    except PromTextError as e:
        raise SampleError(ErrorReason.PARSE, str(e)) from e
    values: dict[str, float | None] = {}
    for attr, _family in _FIELDS:
        candidates: tuple[str, ...] = getattr(mapping, attr)
        picked = _pick(found, candidates)
        if picked is None:
            values[attr] = None
            continue
        _check(candidates[0], picked, ratio=attr == "kv_cache_usage")
        values[attr] = (sum(picked) / len(picked) if attr == "kv_cache_usage"
                        else sum(picked))
    if all(v is None for v in values.values()):
        raise SampleError(ErrorReason.PARSE, f"no {mapping.engine} load metrics on the page")
    return EngineSample(engine=mapping.engine, **values)


def detect(text: str) -> EngineMapping:
    prefix = first_prefix(text, tuple(DETECT_PREFIXES))
    if prefix is None:
        raise SampleError(ErrorReason.PARSE, "no vLLM, SGLang or TGI metrics on the page")
    return MAPPINGS[DETECT_PREFIXES[prefix]]


class EngineReader:
    """Fetches the engine's /metrics with a timeout and interprets it."""

    name = "engine"
    reasons = (*FETCH_REASONS, ErrorReason.INVALID_VALUE)

    def __init__(self, url: str, engine: str = AUTO, timeout: float = 2.0) -> None:
        if engine != AUTO and engine not in MAPPINGS:
            raise ValueError(f"unknown engine {engine!r}")
        self.url = url
        self._mapping = None if engine == AUTO else MAPPINGS[engine]
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    async def read(self) -> EngineSample:
        text = await self._fetch()
        return interpret(text, self._mapping or detect(text))

    async def _fetch(self) -> str:
        if self._session is None:
            # Created lazily: a ClientSession must be made inside the running loop.
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return await fetch_text(self._session, self.url)

    def families(self, sample: EngineSample, ids: Identity) -> Iterator[Metric]:
        for attr, family in (*_FIELDS, ("saturation", catalog.ENGINE_SATURATION)):
            value = getattr(sample, attr)
            if value is not None:
                metric = family.new()
                ids.add(metric, sample.source, value)
                yield metric

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

