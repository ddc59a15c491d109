"""/metrics: one negotiation of the format for every service, and, for the Instance
exporter, a page rendered once per sampling round, not once per scrape.

Every page speaks both formats a scraper may ask for, as prometheus_client's
`choose_encoder` negotiates them: OpenMetrics 1.0.0 for a scraper whose `Accept`
names `application/openmetrics-text` (Prometheus asks first for it), the text format
0.0.4 for anyone else (curl, promtool, an old scraper). Where `choose_encoder`
differs, HTTP's rules win: a version that is not a number is not OpenMetrics 1.x
(there it fails the page with a TypeError), a media range weighted `q=0` is refused,
not chosen, and media types match in any case. A scraper asking for a later version
(2.0.0) gets 1.0.0, and a Content-Type that says so. Every answer says `Vary:
Accept`, so a cache between scraper and service never serves one format for the other.

Rendering text is most of what a scrape costs (prometheus_client formats and
escapes every line in Python), yet between two samples the held state, and so
the page, does not change: an HA pair of Prometheus servers, or ten, would pay
to render the same bytes again and again. So the Instance exporter's page is cut
in two. The part only a sample can change is rendered on the first scrape after
the state's key changes, once per format, and then served as cached bytes; the
part measured at scrape time (a sample's age, the process' own series) is rendered
for every scrape, in the page's format, and appended before the OpenMetrics
terminator. Keying on the state rather than on a timer means a sample that lands
between two scrapes is never hidden behind a stale page.

The page is served uncompressed even to a scraper that accepts gzip (Prometheus
always asks): measured, compressing each scrape's page costs ~0.17 ms of CPU,
more than serving the cached part, to save ~6 KB on a 7.5 KB page.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass

from aiohttp import hdrs, web
from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4, ProcessCollector, generate_latest
from prometheus_client.core import Metric
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.registry import Collector

from poolscope.service.build import BuildInfoCollector

OPENMETRICS_TYPE = "application/openmetrics-text"


@dataclass(frozen=True, eq=False)
class Format:
    """One exposition format: how a part of a page renders, and how a page ends."""

    name: str
    content_type: str
    generate: Callable[[Collector], bytes]
    # What ends a whole page (OpenMetrics' `# EOF`); parts are rendered without it.
    terminator: bytes = b""

    def part(self, collector: Collector) -> bytes:
        """The collector's families without the terminator, so that parts rendered
        apart (a cached one, a fresh one) join into one page."""
        text = self.generate(collector)
        if not text.endswith(self.terminator):
            raise RuntimeError(f"{self.name} rendering does not end with {self.terminator!r}")
        return text[:len(text) - len(self.terminator)]

    def page(self, *parts: bytes) -> bytes:
        return b"".join(parts) + self.terminator


TEXT = Format("text 0.0.4", CONTENT_TYPE_PLAIN_0_0_4, generate_latest)
OPENMETRICS = Format("OpenMetrics 1.0.0", openmetrics.CONTENT_TYPE_LATEST,
                     openmetrics.generate_latest, b"# EOF\n")


def _weight(media_range: str) -> tuple[Format | None, float]:
    """What one `Accept` media range asks for and how much: OpenMetrics of version
    1.0.0 or later (or none: the latest), the text format (text/plain, */*), or
    something we do not serve; with its q (0: refused)."""
    media_type, *params = (p.strip() for p in media_range.split(";"))
    values = {k.strip().lower(): v.strip() for k, _, v in (p.partition("=") for p in params)}
    try:
        q = float(values.get("q", "1"))
    except ValueError:
        return None, 0.0
    media_type = media_type.lower()
    if media_type in ("text/plain", "text/*", "*/*"):
        return TEXT, q
    if media_type != OPENMETRICS_TYPE:
        return None, 0.0
    version = values.get("version")
    try:
        numbers = tuple(int(n) for n in version.split(".")) if version else (1, 0, 0)
    except ValueError:
        return None, 0.0
    return (OPENMETRICS, q) if numbers + (0,) * (3 - len(numbers)) >= (1, 0, 0) else (None, 0.0)


def negotiate(accept: str | None) -> Format:
    """The format to serve a scraper whose `Accept` header is `accept`: OpenMetrics
    when it weighs that at least as much as the text format (client_python serves
    OpenMetrics whenever it is named at all; weights let a scraper that lists it
    below text get text), else the text format, which is also what no header, or
    one naming neither, gets. A range's weight is its own: `*/*` counts for text."""
    best = {TEXT: 0.0, OPENMETRICS: 0.0}
    for media_range in (accept or "").split(","):
        fmt, q = _weight(media_range)
        if fmt is not None:
            best[fmt] = max(best[fmt], q)
    return OPENMETRICS if best[OPENMETRICS] > 0 and best[OPENMETRICS] >= best[TEXT] else TEXT


Page = Callable[[Format], bytes]


def metrics_handler(page: Page, threaded: bool = False
                    ) -> Callable[[web.Request], Awaitable[web.Response]]:
    """The aiohttp handler every service's /metrics is: negotiate, render, label.

    `threaded` renders on a thread: a page whose size another program decides (a
    gateway's tens of thousands of endpoints) takes a second or more to render,
    and the event loop must answer /healthz meanwhile. `page` must then read the
    loop's state as it is replaced or counted, never a container the loop resizes."""
    async def metrics(request: web.Request) -> web.Response:
        # Several Accept headers are one list (RFC 9110, 5.3).
        fmt = negotiate(",".join(request.headers.getall(hdrs.ACCEPT, ())))
        body = await asyncio.to_thread(page, fmt) if threaded else page(fmt)
        return web.Response(body=body, headers={hdrs.CONTENT_TYPE: fmt.content_type,
                                                hdrs.VARY: hdrs.ACCEPT})
    return metrics


class _Families(Collector):
    """A function yielding families, as a collector prometheus_client renders
    directly (a registry's lock and bookkeeping would cost more than the tail)."""

    def __init__(self, families: Callable[[], Iterable[Metric]]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        yield from self._families()


def process_collectors() -> tuple[Collector, Collector]:
    """What every service's page says about its own process: prometheus_client's
    standard `process_*` series and `poolscope_build_info`. They describe the
    process, not the cluster, so they carry no `source` and no identity labels,
    exactly as every other exporter publishes them."""
    return BuildInfoCollector(), ProcessCollector(registry=None)


class ScrapePage:
    """A page rendered whole for every scrape, from `collectors` in order (a
    registry, `process_collectors()`); their family names must not overlap."""

    def __init__(self, *collectors: Collector) -> None:
        self._all = _Families(lambda: itertools.chain.from_iterable(
            c.collect() for c in collectors))

    def page(self, fmt: Format = TEXT) -> bytes:
        return fmt.page(fmt.part(self._all))


class RoundCache:
    """The exposition of `sampled` families, rendered once per value of `key()` and
    format, followed by the `scrape_time` families rendered for each page.

    `key()` must change whenever anything `sampled` yields could: a sample taken,
    an operator's switch flipped. It is called on every page, so it must be cheap.
    No family may be in both parts: a page may name each family once.
    """

    def __init__(self, key: Callable[[], Hashable],
                 sampled: Callable[[], Iterable[Metric]],
                 scrape_time: Callable[[], Iterable[Metric]]) -> None:
        self._key = key
        self._sampled = _Families(sampled)
        self._scrape_time = _Families(scrape_time)
        self._rounds: dict[str, tuple[Hashable, bytes]] = {}
        self.renders = 0  # how often the sampled part was rendered, all formats together

    def page(self, fmt: Format = TEXT) -> bytes:
        """The whole exposition in `fmt` (by default the text format 0.0.4)."""
        key = self._key()
        held = self._rounds.get(fmt.name)
        if held is None or held[0] != key:
            held = self._rounds[fmt.name] = key, fmt.part(self._sampled)
            self.renders += 1
        return fmt.page(held[1], fmt.part(self._scrape_time))
