"""Instant queries against the Prometheus HTTP API, over an ordered list of backends.

Anything that speaks `/api/v1/query` works (Prometheus, an HA pair of them,
VictoriaMetrics, Thanos, Mimir). Backends are tried in the order given so that a
healthy primary always answers; the next one is asked only when the previous failed.
Every failure names its backend and a short cause, because "no data" in an operator's
dashboard must be traceable to "which Prometheus, and why".
"""

from __future__ import annotations

import logging
import time
import urllib.parse
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Protocol

import aiohttp
import orjson

from scheduler_bridge.summary import Vector, gc_paused
from scheduler_bridge.vector_layout import Layout

log = logging.getLogger(__name__)

# Smaller answers are parsed in full every time: that is cheap, and a layout's memory
# and cutting are not worth it.
LAYOUT_MIN_SERIES = 100
# Layouts kept per PrometheusAPI, one per (backend, query): the bridges send a fixed
# handful of queries, so this only bounds memory against a caller that varies them.
MAX_LAYOUTS = 16


class ErrorKind:
    """Bounded set of causes: they become a metric label."""

    TIMEOUT = "timeout"
    CONNECT = "connect"
    HTTP = "http_status"
    API = "api_error"
    RESPONSE = "bad_response"


class BackendError(Exception):
    """One backend failed one query."""

    def __init__(self, backend: str, kind: str, detail: str) -> None:
        super().__init__(f"{backend}: {kind}: {detail}")
        self.backend = backend
        self.kind = kind
        self.detail = detail

    def as_dict(self) -> dict[str, str]:
        return {"backend": self.backend, "cause": self.kind, "detail": self.detail}


class AllBackendsFailed(Exception):
    """Every backend failed; carries each one's error, in the order they were tried."""

    def __init__(self, errors: Sequence[BackendError]) -> None:
        super().__init__("; ".join(str(e) for e in errors))
        self.errors = tuple(errors)


class QueryObserver(Protocol):
    def observe_query(self, backend: str, seconds: float, error: BackendError | None) -> None:
        ...


@dataclass(frozen=True)
class QueryResult:
    samples: Vector
    backend: str


def redact(url: str) -> str:
    """The URL without user:password, so it can be logged and used as a label."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url.rstrip("/")
    netloc = parts.hostname or ""
    if parts.port is not None:
        netloc = f"{netloc}:{parts.port}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc)).rstrip("/")


class PrometheusAPI:
    """Instant queries with an explicit evaluation time, first answering backend wins."""

    def __init__(self, backends: Sequence[str], session: aiohttp.ClientSession,
                 timeout_s: float, observer: QueryObserver | None = None) -> None:
        if not backends:
            raise ValueError("at least one Prometheus URL is needed")
        self._backends = tuple(b.rstrip("/") for b in backends)
        self.names = tuple(redact(b) for b in backends)
        self._session = session
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._observer = observer
        self._layouts: dict[tuple[str, str], Layout] = {}

    async def query(self, promql: str, at: float) -> QueryResult:
        """Evaluate `promql` at `at` (unix seconds); raises AllBackendsFailed."""
        errors: list[BackendError] = []
        for url, name in zip(self._backends, self.names, strict=True):
            started = time.perf_counter()
            error: BackendError | None = None
            try:
                samples = await self._query_one(url, name, promql, at)
            except BackendError as e:
                error = e
                errors.append(e)
                log.warning("query %r at %s failed on %s", promql, at, e)
                continue
            finally:
                if self._observer is not None:
                    self._observer.observe_query(name, time.perf_counter() - started, error)
            return QueryResult(samples, name)
        raise AllBackendsFailed(errors)

    async def samples(self, promql: str, at: float) -> Vector:
        """`query` shaped as summary.InstantQuery, for queries.read_snapshot."""
        return (await self.query(promql, at)).samples

    async def _query_one(self, url: str, name: str, promql: str, at: float) -> Vector:
        # Prometheus keeps millisecond precision; sending exactly that keeps the
        # evaluation time we report identical to the one it used. VictoriaMetrics
        # answers a query near now as of `now - latencyOffset` yet labels it with the
        # time asked; `nocache=1` makes it evaluate at that time (Prometheus ignores it).
        params = {"query": promql, "time": f"{at:.3f}", "nocache": "1"}
        try:
            async with self._session.get(f"{url}/api/v1/query", params=params,
                                         timeout=self._timeout) as resp:
                body = await resp.read()
                status = resp.status
        except TimeoutError as e:
            raise BackendError(name, ErrorKind.TIMEOUT, "no answer in time") from e
        except aiohttp.ClientError as e:
            raise BackendError(name, ErrorKind.CONNECT, str(e) or type(e).__name__) from e
        return self._read(url, name, promql, status, body)

    def _read(self, url: str, name: str, promql: str, status: int, body: bytes) -> Vector:
        """The answer's vector: only its values are read when its series are the last
        answer's (vector_layout); otherwise in full, and its layout kept for the next."""
        key = (url, promql)
        layout = self._layouts.get(key)
        if layout is not None and status == 200:
            values = layout.values_of(body)
            if values is not None:
                return Vector(layout.labels, values)
        vector = _parse(name, status, body)  # a failed answer keeps the last layout
        fresh = Layout.cut(body, vector.labels) if len(vector) >= LAYOUT_MIN_SERIES else None
        self._layouts.pop(key, None)
        if fresh is not None:
            while len(self._layouts) >= MAX_LAYOUTS:
                del self._layouts[next(iter(self._layouts))]
            self._layouts[key] = fresh
        return vector


_METRIC, _VALUE, _TEXT = itemgetter("metric"), itemgetter("value"), itemgetter(1)


def _parse(name: str, status: int, body: bytes) -> Vector:
    with gc_paused():
        return _parse_body(name, status, body)


def _parse_body(name: str, status: int, body: bytes) -> Vector:
    try:
        doc: Any = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        kind = ErrorKind.HTTP if status != 200 else ErrorKind.RESPONSE
        raise BackendError(name, kind, f"HTTP {status}, not JSON: {body[:200]!r}") from e
    if not isinstance(doc, dict) or doc.get("status") != "success":
        error = doc.get("error", "") if isinstance(doc, dict) else ""
        kind = ErrorKind.API if error else ErrorKind.HTTP
        raise BackendError(name, kind, f"HTTP {status}: {error or str(doc)[:200]}")
    try:
        data = doc["data"]
        if data["resultType"] != "vector":
            raise BackendError(name, ErrorKind.RESPONSE,
                               f"expected a vector, got {data['resultType']}")
        for warning in doc.get("warnings", ()):
            log.warning("%s: %s", name, warning)
        # Whole-list maps run in C: no Python bytecode per series (34,000 at 1,000 pools).
        result = data["result"]
        labels = list(map(_METRIC, result))
        values = array("d", map(float, map(_TEXT, map(_VALUE, result))))
    except (KeyError, TypeError, IndexError, ValueError) as e:
        raise BackendError(name, ErrorKind.RESPONSE, f"malformed result: {e!r}") from e
    if not set(map(type, labels)) <= {dict}:
        raise BackendError(name, ErrorKind.RESPONSE, "malformed result: a metric is no object")
    return Vector(labels, values)
