"""Rates after a gap in scrapes, on a real Prometheus running rules/.

The rates the rules take from a counter (the Proxy side's requests) are checked
here; the network's and the engines' are each exporter's own over its own samples
(tests/instance/test_window_rate.py), which a gap in scrapes does not bias.

One pool's counter grows at a known, steady rate: this process serves it as a
linear function of the wall clock, so every scrape reads the true value at its
own timestamp, and it has run long before Prometheus starts. That start is a
restart without history (one that lost its storage, or was down for more than
the 1m window): rate() over the first minute's mostly empty windows would read
from ~3% of the truth up. Each rate rollup must instead be absent until its
window is covered (a sample in its first 8 s: 52 s after the first scrape), then
at most 12.5% low at these 1 s intervals (rate() extrapolates half an interval
over the first 8 s: 52.5 s of 60) and never high.

Every evaluation is checked, not a sample of them: each rule group records a
gauge rollup at every evaluation, whose timestamps are the evaluations', and
the rate rollups are read back beside them. (The end of a window, a restart on
its own storage before its first scrape, is covered by the promtool cases.)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness.polling import eventually
from harness.prometheus import History, recording, scrape_config

pytestmark = pytest.mark.integration

POOL = "p-gap"
QPS = 4.0  # requests/s the Proxy counts
BASE = 1e6  # the counter's value when served first: it ran long before Prometheus
COVERED_S = 52.0  # a rate is kept once its window's first 8 s hold a sample
# The bound at a 1 s scrape interval: the first covered window starts 8 s short, and
# its newest sample may still be in flight (rate() then extrapolates half a second).
LOW, HIGH = (COVERED_S - 0.5) / 60, 1.0
TOLERANCE = 0.01  # a scrape stamped a few ms before the value is read
WAIT_S = 90.0

# (rate rollup, the raw counter, a gauge rollup of the same rule group recorded at
# every evaluation, the true rate)
RATES = (
    ("proxy_pool:requests:rate1m", "poolscope_proxy_requests_total",
     "proxy_pool:inflight_requests:sum", QPS),
)


class SteadyCounters(BaseHTTPRequestHandler):
    started = time.time()

    def do_GET(self) -> None:
        elapsed = time.time() - self.started
        pool = f'proxy_id="{POOL}"'
        body = "\n".join((
            f'poolscope_proxy_requests_total{{{pool},source="proxy_dispatch",outcome="ok"}} '
            f"{BASE + QPS * elapsed!r}",
            f'poolscope_proxy_pool_inflight_requests{{{pool},source="proxy_dispatch"}} 1',
            "",
        )).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[History]:
    workdir = tmp_path_factory.mktemp("rates")
    server = ThreadingHTTPServer(("127.0.0.1", 0), SteadyCounters)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        target = f"127.0.0.1:{server.server_address[1]}"
        with recording(workdir, [scrape_config("steady", [target])]) as history:
            yield history
    finally:
        server.shutdown()
        server.server_close()


def recorded_after(history: History, n: int) -> None:
    """Wait until every rate rollup of the pool was recorded `n` times."""
    for rollup, *_ in RATES:
        selector = f'{rollup}{{proxy_id="{POOL}"}}'
        eventually(lambda s=selector: len(history.samples(s)), lambda k: k >= n, WAIT_S,
                   f"{selector} recorded {n} times")


def evaluations(history: History) -> dict[str, list[tuple[float, float | None]]]:
    """For each rate rollup: every evaluation of its group since it started, with the
    rate it recorded (None: absent)."""
    out = {}
    for rollup, _, gauge, _ in RATES:
        rates = dict(history.samples(f'{rollup}{{proxy_id="{POOL}"}}'))
        evals = [t for t, _ in history.samples(f'{gauge}{{proxy_id="{POOL}"}}')]
        assert rates.keys() <= set(evals), (rollup, sorted(rates.keys() - set(evals)))
        out[rollup] = [(t, rates.get(t)) for t in evals]
    return out


def assert_within_bounds(evals: dict[str, list[tuple[float, float | None]]]) -> None:
    truth = {rollup: rate for rollup, _, _, rate in RATES}
    for rollup, seen in evals.items():
        off = [(t, v / truth[rollup]) for t, v in seen if v is not None
               and not LOW - TOLERANCE <= v / truth[rollup] <= HIGH + TOLERANCE]
        assert off == [], (rollup, off)


def test_no_rate_until_its_window_is_covered_then_at_most_12_5_percent_low(run: History) -> None:
    recorded_after(run, 3)
    evals = evaluations(run)
    for rollup, counter, _, _ in RATES:
        start = run.samples(f'{counter}{{proxy_id="{POOL}"}}')[0][0]
        early = [(round(t - start, 3), v) for t, v in evals[rollup] if t < start + COVERED_S]
        # rate() alone recorded a value at each of these, from ~3% of the truth up.
        assert [(t, v) for t, v in early if v is not None] == [], rollup
        assert len(early) >= 30, (rollup, len(early))
        # Kept from the first evaluations that cover the window, those a 6 s bound
        # would still drop (a missed scrape may drop one of them).
        first = [v for t, v in evals[rollup] if start + COVERED_S <= t < start + COVERED_S + 2]
        assert any(v is not None for v in first), (rollup, first)
    assert_within_bounds(evals)
