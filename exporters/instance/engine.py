"""Engine load, read from the engine's own /metrics endpoint.

Anything short of a clean page, every value read in its plausible range
(exporters/common/plausible.py: a running count or a stated capacity a whole
number up to 100,000, a waiting count up to 1,000,000, a KV ratio 0..1), rank by
rank and summed, fails the whole sample: a replica whose numbers cannot be
trusted must look unmeasured (series absent, collector success 0, a reason), not
idle. That holds for a capacity the page states too (TensorRT-LLM's max batch):
it is one page, so an absurd number on it costs the whole sample. llama.cpp's
capacity is another document, read by a collector of its own (slots.py), so an
absurd `total_slots` costs the capacity alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, replace
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit, urlunsplit

import aiohttp
from prometheus_client.core import Metric

from poolscope.contract import catalog
from poolscope.contract.thresholds import KV_FULL, WAITING_Q
from poolscope.exporters.common.fetch import FETCH_REASONS, fetch_before, fetch_text
from poolscope.exporters.common.health import ErrorReason, HealthBoard
from poolscope.exporters.common.plausible import (
    AMOUNT,
    FLAG,
    QUEUED,
    RATIO,
    RUNNING,
    Range,
)
from poolscope.exporters.common.promtext import Labels, PromTextError, prefixes_on_page, select
from poolscope.exporters.common.sampling import SampleError
from poolscope.exporters.instance.engines import (
    LOAD_FIELDS,
    MAPPINGS,
    READ_FIELDS,
    Derived,
    EngineMapping,
    Series,
)
from poolscope.exporters.instance.slots import SlotsReader
from poolscope.service.identity import Identity

AUTO = "auto"

# The range of each field's values, rank by rank and summed; any other field is a
# counter (AMOUNT).
_RANGES = {"running": RUNNING, "waiting": QUEUED, "capacity": RUNNING,
           "kv_cache_usage": RATIO, "awake": FLAG}


@dataclass(frozen=True)
class EngineSample:
    engine: str
    running: float | None
    waiting: float | None
    # Mean over data-parallel ranks (the replica's overall occupancy) and the
    # fullest rank (what the next request may land on: admission reads it).
    kv_cache_usage: float | None
    kv_cache_usage_max: float | None
    request_success: float | None
    prompt_tokens: float | None
    generation_tokens: float | None
    # The engine's own limit on concurrent requests, where it states one.
    capacity: float | None = None
    # True while any rank says it is asleep (it then reads 0 running, 0 waiting, an
    # empty KV cache, yet serves nothing), False while every rank says it is awake,
    # None where the page has no sleep state (most engines, older releases).
    asleep: bool | None = None

    @property
    def source(self) -> str:
        return catalog.engine_source(self.engine)

    @property
    def saturation(self) -> float | None:
        """The engine scored as the Gateway API Inference Extension scores an endpoint:
        the worse of its queue against WAITING_Q and its fullest rank's KV cache against
        KV_FULL (1 is the healthy limit); one side alone when the other is not exposed
        (TGI has no KV figure), None when neither is."""
        terms = [v / limit for v, limit in ((self.waiting, WAITING_Q),
                                            (self.kv_cache_usage_max, KV_FULL))
                 if v is not None]
        return max(terms) if terms else None


# The sample field behind each series the reader publishes.
PUBLISHED: tuple[tuple[str, catalog.Family], ...] = (
    ("running", catalog.ENGINE_REQUESTS_RUNNING),
    ("waiting", catalog.ENGINE_REQUESTS_WAITING),
    ("kv_cache_usage", catalog.ENGINE_KV_CACHE_USAGE),
    ("kv_cache_usage_max", catalog.ENGINE_KV_CACHE_USAGE_MAX),
    ("request_success", catalog.ENGINE_REQUEST_SUCCESS),
    ("prompt_tokens", catalog.ENGINE_PROMPT_TOKENS),
    ("generation_tokens", catalog.ENGINE_GENERATION_TOKENS),
    ("saturation", catalog.ENGINE_SATURATION),
)


def _samples(found: dict[str, list[tuple[Labels, float]]], series: Series,
             mapping: EngineMapping) -> tuple[str, list[tuple[Labels, float]]] | None:
    """The first candidate on the page, and its samples that match `where`."""
    for name in series.names:
        for spelling in mapping.spellings(name):
            if spelling in found:
                wanted = [(labels, v) for labels, v in found[spelling]
                          if all(dict(labels).get(k, "") == want for k, want in series.where)]
                return (spelling, wanted) if wanted else None
    return None


def _ranks(samples: list[tuple[Labels, float]], series: Series,
           mapping: EngineMapping) -> dict[Labels, float]:
    """One value per rank, keyed by the rank's labels (without those `where` fixes).

    A rank's samples differ only by copy and by part: each copy is its total where
    the page gives one, else the sum of its parts; the copies count once, at their max.
    """
    fixed = {k for k, _ in series.where}
    grouped: dict[Labels, dict[Labels, list[tuple[Labels, float]]]] = {}
    for labels, value in samples:
        rank = tuple(kv for kv in labels if kv[0] not in mapping.copies
                     and kv[0] not in fixed and kv[0] not in series.totals)
        copy = tuple(kv for kv in labels if kv[0] in mapping.copies)
        grouped.setdefault(rank, {}).setdefault(copy, []).append((labels, value))
    return {rank: max(_total(parts, series.totals) for parts in copies.values())
            for rank, copies in grouped.items()}


def _total(parts: list[tuple[Labels, float]], totals: tuple[str, ...]) -> float:
    whole = [v for labels, v in parts if all(dict(labels).get(t, "") == "" for t in totals)]
    return whole[0] if whole else sum(v for _labels, v in parts)


def _series(found: dict[str, list[tuple[Labels, float]]], series: Series,
            mapping: EngineMapping, valid: Range) -> dict[Labels, float] | None:
    picked = _samples(found, series, mapping)
    if picked is None:
        return None
    name, samples = picked
    for _labels, v in samples:
        valid.check(name, v)
    return _ranks(samples, series, mapping)


def _derive(found: dict[str, list[tuple[Labels, float]]], derived: Derived,
            mapping: EngineMapping, valid: Range) -> list[float] | None:
    left = _series(found, derived.left, mapping, AMOUNT)
    right = _series(found, derived.right, mapping, AMOUNT)
    if left is None or right is None:
        return None
    if left.keys() != right.keys():
        raise SampleError(ErrorReason.INVALID_VALUE,
                          f"{derived.left.names[0]}: {derived.left.where} and "
                          f"{derived.right.where} are not published for the same label sets")
    # A rank whose denominator is 0 has no ratio: it is left out, never read as 0.
    values = [left[k] - right[k] if derived.op == "minus" else left[k] / right[k]
              for k in left if derived.op == "minus" or right[k] > 0]
    for v in values:
        valid.check(f"{derived.left.names[0]} {derived.op} {derived.right.names[0]}", v)
    return values or None


def _field(found: dict[str, list[tuple[Labels, float]]], attr: str,
           mapping: EngineMapping) -> list[float] | None:
    """Every rank's value of every series the field sums (or, where none is on the
    page, of the figure older releases derive); None when nothing is."""
    valid = _RANGES.get(attr, AMOUNT)
    values: list[float] | None = None
    for series in getattr(mapping, attr):
        ranks = _series(found, series, mapping, valid)
        if ranks is not None:
            values = (values or []) + list(ranks.values())
    derived = mapping.derivation(attr)
    if values is None and derived is not None:
        values = _derive(found, derived, mapping, valid)
    return values


def interpret(text: str, mapping: EngineMapping) -> EngineSample:
    """Turn one /metrics page into a sample using `mapping`; raises SampleError."""
    try:
        found = select(text, mapping.names())
    except PromTextError as e:
        raise SampleError(ErrorReason.PARSE, str(e)) from e
    counts = {attr: _field(found, attr, mapping)
              for attr in READ_FIELDS if attr != "kv_cache_usage"}
    kv = _field(found, "kv_cache_usage", mapping)
    if kv is None and all(counts[attr] is None for attr in LOAD_FIELDS
                          if attr != "kv_cache_usage"):
        raise SampleError(ErrorReason.PARSE, f"no {mapping.engine} load metrics on the page")
    for attr, values in counts.items():
        if values is not None:
            # Every rank may be plausible and their sum still not.
            _RANGES.get(attr, AMOUNT).check(f"{mapping.engine} {attr}, all ranks", sum(values))
    return EngineSample(
        engine=mapping.engine,
        kv_cache_usage=sum(kv) / len(kv) if kv else None,
        kv_cache_usage_max=max(kv) if kv else None,
        asleep=_asleep(found, mapping),
        **{attr: sum(v) if v is not None else None for attr, v in counts.items()})


def _asleep(found: dict[str, list[tuple[Labels, float]]], mapping: EngineMapping) -> bool | None:
    """Asleep when any rank's awake flag is 0: one sleeping rank already refuses the
    requests routed to it, so the Instance is taken as asleep (coarse upward). A flag
    that is neither 0 nor 1 fails the read (FLAG), never read as either."""
    flags = _field(found, "awake", mapping)
    if flags is None:
        return None
    return any(flag == 0 for flag in flags)


def detect(text: str) -> EngineMapping:
    """The one engine whose names are on the page; never a guess between two."""
    on_page = prefixes_on_page(text, tuple(p for m in MAPPINGS.values() for p in m.detect))
    engines = sorted({m.engine for m in MAPPINGS.values() if on_page & set(m.detect)})
    if not engines:
        raise SampleError(ErrorReason.PARSE,
                          f"no metrics of a known engine ({', '.join(MAPPINGS)}) on the page")
    if len(engines) > 1:
        raise SampleError(ErrorReason.PARSE,
                          f"metrics of several engines ({', '.join(engines)}) on the page; "
                          "name one with --engine")
    return MAPPINGS[engines[0]]


def engine_url(url: str) -> str:
    """The URL the exporter reads for `url`; raises ValueError for one it must not read.

    llama.cpp's router (one llama-server, several models) serves a model's page at
    /metrics?model=NAME, and by default loads the model a request names, evicting
    another past --models-max. Reading must not change what the engine runs, so a
    URL that names a model reads with autoload=false (a model not loaded then fails
    the read: it is not measured), and one asking for autoload is refused.
    """
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    given = dict(query)
    if "model" not in given:
        return url
    # llama.cpp loads the model for "true" and "1" only.
    if given.get("autoload") in ("true", "1"):
        raise ValueError(f"{url}: autoload={given['autoload']} would have every read load "
                         "the model; leave autoload out (the exporter reads with "
                         "autoload=false)")
    if "autoload" not in given:
        query.append(("autoload", "false"))
    return urlunsplit(parts._replace(query=urlencode(query)))


class EngineReader:
    """Fetches the engine's /metrics with a timeout and interprets it.

    For an engine that states its slot count beside /metrics (llama.cpp), that
    document is read too unless `engine_capacity` is off (the operator configured
    a capacity), as a collector of its own on `board` (exporters/instance/slots.py):
    its failure costs the capacity, never the load.
    """

    name = "engine"
    reasons = (*FETCH_REASONS, ErrorReason.INVALID_VALUE)

    def __init__(self, url: str, engine: str = AUTO, timeout: float = 2.0,
                 engine_capacity: bool = True, board: HealthBoard | None = None) -> None:
        if engine != AUTO and engine not in MAPPINGS:
            raise ValueError(f"unknown engine {engine!r}")
        self.url = engine_url(url)
        self._mapping = None if engine == AUTO else MAPPINGS[engine]
        self._slots = SlotsReader(board) if engine_capacity else None
        if self._slots is not None and self._mapping is not None and self._mapping.slots_path:
            self._slots.expect()
        self._timeout_s = timeout
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    async def read(self) -> EngineSample:
        # One deadline for /metrics and /props together: the sampling loop gives the
        # whole read the engine timeout (plus a little).
        deadline = asyncio.get_running_loop().time() + self._timeout_s
        text = await fetch_before(deadline, self._fetch, self.url)
        # On a thread: a page of a hundred thousand wanted lines (16 MiB at most, a
        # hostile or broken engine's) takes seconds to read, and the loop must serve
        # scrapes and /healthz meanwhile.
        mapping, sample = await asyncio.to_thread(self._interpret, text)
        if mapping.slots_path and self._slots is not None:
            url = _beside(self.url, mapping.slots_path)
            sample = replace(sample, capacity=await self._slots.read(self._fetch, url, deadline))
        return sample

    def _interpret(self, text: str) -> tuple[EngineMapping, EngineSample]:
        mapping = self._mapping or detect(text)
        return mapping, interpret(text, mapping)

    async def _fetch(self, url: str) -> str:
        if self._session is None:
            # Created lazily: a ClientSession must be made inside the running loop.
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return await fetch_text(self._session, url)

    def families(self, sample: EngineSample, ids: Identity) -> Iterator[Metric]:
        for attr, family in PUBLISHED:
            value = getattr(sample, attr)
            if value is not None:
                metric = family.new()
                ids.add(metric, sample.source, value)
                yield metric

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _beside(url: str, name: str) -> str:
    """The document `name` next to `url`: its last path segment (or trailing slash)
    replaced, its query kept."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=urljoin(parts.path.rstrip("/"), name)))
