"""Instant and range queries against the Prometheus HTTP API, over an ordered list of
backends.

Anything that speaks `/api/v1/query` and `/api/v1/query_range` works (Prometheus, an
HA pair of them, VictoriaMetrics, Thanos, Mimir). Backends are tried in the order given
so that a healthy primary always answers; the next one is asked only when the previous
failed.
Every failure names its backend and a short cause, because "no data" in an operator's
dashboard must be traceable to "which Prometheus, and why".
"""

from __future__ import annotations

import logging
import time
import urllib.parse
from array import array
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from operator import itemgetter
from typing import Any, Protocol, TypeVar

import aiohttp
import orjson

from poolscope.bridge.summary import Vector
from poolscope.bridge.vector_layout import Layout

log = logging.getLogger(__name__)

T = TypeVar("T")

# Smaller answers are parsed in full every time: that is cheap, and a layout's memory
# and cutting are not worth it.
LAYOUT_MIN_SERIES = 100
# Layouts kept per PrometheusAPI, one per (backend, query): the bridges send a fixed
# handful of queries, so this only bounds memory against a caller that varies them.
MAX_LAYOUTS = 16
# Bounds one answer's body: 1,000 pools answer in about 5 MB, and parsing holds about
# many times the body in Python objects.
MAX_ANSWER_BYTES = 128 * 1024 * 1024
# How far a backend's clock may stray from the bridge's before its answers are refused:
# rollups evaluated at the bridge's "now" are only current if Prometheus agrees on it.
MAX_CLOCK_SKEW_S = 2.0


class ErrorKind:
    """Bounded set of causes: they become a metric label."""

    TIMEOUT = "timeout"
    CONNECT = "connect"
    HTTP = "http_status"
    API = "api_error"
    RESPONSE = "bad_response"
    TOO_LARGE = "too_large"
    CLOCK = "clock_skew"


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


# One range series: its label set, and its (unix seconds, value) points in time order.
Points = tuple[tuple[float, float], ...]
RangeSeries = tuple[dict[str, str], Points]


@dataclass(frozen=True)
class RangeResult:
    series: tuple[RangeSeries, ...]
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
    """Queries with explicit evaluation times, first answering backend wins."""

    def __init__(self, backends: Sequence[str], session: aiohttp.ClientSession,
                 timeout_s: float, observer: QueryObserver | None = None, *,
                 max_answer_bytes: int = MAX_ANSWER_BYTES,
                 max_clock_skew_s: float = MAX_CLOCK_SKEW_S,
                 clock: Callable[[], float] = time.time) -> None:
        if not backends:
            raise ValueError("at least one Prometheus URL is needed")
        self._backends = tuple(b.rstrip("/") for b in backends)
        self.names = tuple(redact(b) for b in backends)
        self._session = session
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._observer = observer
        self._max_bytes = max_answer_bytes
        self._max_skew = max_clock_skew_s
        self._clock = clock
        self._layouts: dict[tuple[str, str], Layout] = {}

    async def query(self, promql: str, at: float) -> QueryResult:
        """Evaluate `promql` at `at` (unix seconds); raises AllBackendsFailed."""
        # Prometheus keeps millisecond precision; sending exactly that keeps the
        # evaluation time we report identical to the one it used. VictoriaMetrics
        # answers a query near now as of `now - latencyOffset` yet labels it with the
        # time asked; `nocache=1` makes it evaluate at that time (Prometheus ignores it).
        params = {"query": promql, "time": f"{at:.3f}", "nocache": "1"}
        samples, backend = await self._first(
            "/api/v1/query", params, f"query {promql!r} at {at}",
            lambda url, name, status, body: self._read(url, name, promql, status, body))
        return QueryResult(samples, backend)

    async def samples(self, promql: str, at: float) -> Vector:
        """`query` shaped as summary.InstantQuery, for queries.read_snapshot."""
        return (await self.query(promql, at)).samples

    async def query_range(self, promql: str, start: float, end: float,
                          step_s: float) -> RangeResult:
        """Evaluate `promql` at every `step_s` from `start` to `end` (unix seconds);
        raises AllBackendsFailed. Times keep `query`'s millisecond precision, and
        `nocache=1` keeps VictoriaMetrics from moving start and end onto its cache's
        grid: the points land on the times asked."""
        params = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}",
                  "step": f"{step_s:.3f}", "nocache": "1"}
        series, backend = await self._first(
            "/api/v1/query_range", params, f"range query {promql!r} from {start} to {end}",
            lambda url, name, status, body: _parse_matrix(name, status, body))
        return RangeResult(series, backend)

    async def _first(self, path: str, params: dict[str, str], what: str,
                     read: Callable[[str, str, int, bytes], T]) -> tuple[T, str]:
        """The first backend's answer that `read` accepts, with that backend's name;
        `read(url, name, status, body)` raises BackendError to try the next one."""
        errors: list[BackendError] = []
        for url, name in zip(self._backends, self.names, strict=True):
            started = time.perf_counter()
            error: BackendError | None = None
            try:
                status, body = await self._get(url, name, path, params)
                answer = read(url, name, status, body)
            except BackendError as e:
                error = e
                errors.append(e)
                log.warning("%s failed on %s", what, e)
                continue
            finally:
                if self._observer is not None:
                    self._observer.observe_query(name, time.perf_counter() - started, error)
            return answer, name
        raise AllBackendsFailed(errors)

    async def _get(self, url: str, name: str, path: str,
                   params: dict[str, str]) -> tuple[int, bytes]:
        """One backend's status and bounded body, from a clock that agrees with ours."""
        sent = self._clock()
        try:
            async with self._session.get(f"{url}{path}", params=params,
                                         timeout=self._timeout) as resp:
                body = await self._body(name, resp)
                status = resp.status
                date = resp.headers.get("Date")
        except TimeoutError as e:
            raise BackendError(name, ErrorKind.TIMEOUT, "no answer in time") from e
        except aiohttp.ClientError as e:
            raise BackendError(name, ErrorKind.CONNECT, str(e) or type(e).__name__) from e
        if date is not None and status == 200:  # an error answer is reported as one
            self._check_clock(name, date, sent, self._clock())
        return status, body

    async def _body(self, name: str, resp: aiohttp.ClientResponse) -> bytes:
        """The body, refused once it passes the bound: no answer can exhaust memory.
        Counted as it is decompressed: a backend may compress whatever was asked."""
        limit = self._max_bytes
        if resp.content_length is not None and resp.content_length > limit:
            raise _too_large(name, limit)
        body = bytearray()
        async for chunk in resp.content.iter_any():
            body += chunk
            if len(body) > limit:
                raise _too_large(name, limit)
        return bytes(body)

    def _check_clock(self, name: str, date: str, sent: float, received: float) -> None:
        """Refuse an answer from a backend whose clock disagrees with the bridge's.

        Prometheus writes `Date` (whole seconds) while answering, so with agreeing
        clocks it falls within [sent, received] truncated. Beyond that, rollups read at
        the bridge's "now" may be minutes old, or not yet written, and look current.
        """
        try:
            their = parsedate_to_datetime(date).timestamp()
        except (TypeError, ValueError):
            return  # not a date we can read: the rollups' own timestamps still count
        if their > received + self._max_skew:
            skew = f"{their - received:.0f} s ahead of"
        elif their + 1.0 < sent - self._max_skew:
            skew = f"{sent - their - 1.0:.0f} s behind"
        else:
            return
        raise BackendError(name, ErrorKind.CLOCK,
                           f"its clock (Date: {date}) is {skew} this bridge's, at least")

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


def _too_large(name: str, limit: int) -> BackendError:
    return BackendError(name, ErrorKind.TOO_LARGE, f"answer over {limit} bytes")


_METRIC, _VALUE, _TEXT = itemgetter("metric"), itemgetter("value"), itemgetter(1)


@contextmanager
def _malformed(name: str) -> Iterator[None]:
    """An answer whose shape is not the API's fails its backend, whatever broke."""
    try:
        yield
    except (KeyError, TypeError, IndexError, ValueError) as e:
        raise BackendError(name, ErrorKind.RESPONSE, f"malformed result: {e!r}") from e


def _result(name: str, status: int, body: bytes, result_type: str) -> Any:
    """The `result` of a successful answer of `result_type`, its warnings logged."""
    try:
        doc: Any = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        kind = ErrorKind.HTTP if status != 200 else ErrorKind.RESPONSE
        raise BackendError(name, kind, f"HTTP {status}, not JSON: {body[:200]!r}") from e
    if not isinstance(doc, dict) or doc.get("status") != "success":
        error = doc.get("error", "") if isinstance(doc, dict) else ""
        kind = ErrorKind.API if error else ErrorKind.HTTP
        raise BackendError(name, kind, f"HTTP {status}: {error or str(doc)[:200]}")
    with _malformed(name):
        data = doc["data"]
        if data["resultType"] != result_type:
            raise BackendError(name, ErrorKind.RESPONSE,
                               f"expected a {result_type}, got {data['resultType']}")
        for warning in doc.get("warnings", ()):
            log.warning("%s: %s", name, warning)
        return data["result"]


def _parse(name: str, status: int, body: bytes) -> Vector:
    result = _result(name, status, body, "vector")
    with _malformed(name):
        # Whole-list maps run in C: no Python bytecode per series (34,000 at 1,000 pools).
        labels = list(map(_METRIC, result))
        values = array("d", map(float, map(_TEXT, map(_VALUE, result))))
    if not set(map(type, labels)) <= {dict}:
        raise BackendError(name, ErrorKind.RESPONSE, "malformed result: a metric is no object")
    return Vector(labels, values)


def _parse_matrix(name: str, status: int, body: bytes) -> tuple[RangeSeries, ...]:
    result = _result(name, status, body, "matrix")
    with _malformed(name):
        series = tuple((item["metric"], tuple((float(t), float(v)) for t, v in item["values"]))
                       for item in result)
    if not all(isinstance(metric, dict) for metric, _ in series):
        raise BackendError(name, ErrorKind.RESPONSE, "malformed result: a metric is no object")
    return series
