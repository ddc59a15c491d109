"""`poolscope-proxy-exporter` (gateway mode) as a user runs it: a real process per case."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness.commands import command_process
from harness.gateway_pages import (
    LLM_D,
    LLM_D_POOL,
    fixture_text,
    many_endpoints,
    without_families,
)
from harness.polling import eventually
from harness.prometheus import free_port, wait_http
from harness.static_http import Page, serving
from poolscope.exporters.proxy.__main__ import DEFAULT_LISTEN, parse
from poolscope.scheduler_bridge.load_report import receive_report
from poolscope.service.argtypes import UsageError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gateways"
URL = "http://router.example:9090/metrics"
BASE = ["--gateway", "llmgw", "--gateway-metrics-url", URL]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "poolscope.exporters.proxy", *args],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("args", "flag"), [
    (["--gateway-metrics-url", URL, "--proxy-id", "p1"], "--gateway"),
    (["--gateway", "nginx", "--gateway-metrics-url", URL, "--proxy-id", "p1"], "--gateway"),
    (["--gateway", "llmgw", "--proxy-id", "p1"], "--gateway-metrics-url"),
    (["--gateway", "llmgw", "--gateway-metrics-url", "router:9090/metrics", "--proxy-id", "p1"],
     "--gateway-metrics-url"),
    (["--gateway", "llmgw", "--gateway-metrics-url", "ftp://router/metrics", "--proxy-id", "p1"],
     "--gateway-metrics-url"),
    (["--gateway", "llmgw", "--gateway-metrics-url", "http:///metrics", "--proxy-id", "p1"],
     "--gateway-metrics-url"),
    ([*BASE, "--proxy-id", "p1", "--pool-label", "pool"], "--pool-label"),
    ([*BASE, "--proxy-id", "p1", "--pool-label"], "--proxy-id"),
    (BASE, "--proxy-id"),
    ([*BASE, "--proxy-id", ""], "--proxy-id"),
    ([*BASE, "--proxy-id", "   "], "--proxy-id"),
    ([*BASE, "--proxy-id", "p1", "--sample-interval", "0"], "--sample-interval"),
    ([*BASE, "--proxy-id", "p1", "--gateway-bearer-token-file", "/nonexistent/token"],
     "--gateway-bearer-token-file"),
    ([*BASE, "--proxy-id", "p1", "--sample-interval", "nan"], "--sample-interval"),
    ([*BASE, "--proxy-id", "p1", "--sample-interval", "-1"], "--sample-interval"),
    ([*BASE, "--proxy-id", "p1", "--sample-interval", "inf"], "--sample-interval"),
    ([*BASE, "--proxy-id", "p1", "--gateway-timeout", "0"], "--gateway-timeout"),
    ([*BASE, "--proxy-id", "p1", "--listen", "nonsense"], "--listen"),
], ids=["no-gateway", "unknown-gateway", "no-url", "url-no-scheme", "url-ftp", "url-no-host",
        "both-pool-flags", "both-pool-flags-bare", "no-pool-flag", "empty-proxy-id",
        "blank-proxy-id", "interval-zero", "token-file-missing", "interval-nan",
        "interval-negative", "interval-inf", "timeout-zero", "listen"])
def test_bad_flags_exit_2_with_one_line_naming_the_flag(args: list[str], flag: str) -> None:
    result = run(*args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("poolscope-proxy-exporter: error: ")
    assert flag in lines[0], lines[0]
    assert result.stdout == ""


@pytest.mark.parametrize("url", ["http://router:99999/metrics", "http://router:abc/metrics"],
                         ids=["port-out-of-range", "port-not-a-number"])
def test_url_with_an_unusable_port_is_a_usage_error(url: str) -> None:
    with pytest.raises(UsageError, match="--gateway-metrics-url"):
        parse(["--gateway", "llmgw", "--gateway-metrics-url", url, "--proxy-id", "p1"])


def test_defaults_and_the_pool_label_per_gateway() -> None:
    config = parse([*BASE, "--proxy-id", "p1"])
    assert f"{config.service.listen.host}:{config.service.listen.port}" == DEFAULT_LISTEN
    assert config.service.listen.host == "127.0.0.1"
    assert config.interval == 1.0
    reader = config.reader
    assert (reader.gateway.name, reader.url) == ("llmgw", URL)
    assert (reader.pools.proxy_id, reader.pools.label) == ("p1", None)
    # A bare --pool-label means the gateway's own pool label.
    assert parse([*BASE, "--pool-label"]).reader.pools.label == "pool"
    gie = ["--gateway", "gie", "--gateway-metrics-url", URL]
    assert parse([*gie, "--pool-label"]).reader.pools.label == "name"
    assert parse([*gie, "--pool-label", "inference_pool"]).reader.pools.label == "inference_pool"
    assert parse([*BASE, "--pool-label", "--sample-interval", "2"]).interval == 2.0


Series = tuple[str, frozenset[tuple[str, str]]]


def _metrics(url: str) -> dict[Series, float]:
    """The page at `url` by (sample name, labels); empty while it does not answer."""
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            text = r.read().decode()
    except (urllib.error.URLError, OSError):
        return {}
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _series(name: str, **labels: str) -> Series:
    return name, frozenset(labels.items())


def _served(url: str, proc: subprocess.Popen[str], series: Series,
            what: str) -> dict[Series, float]:
    """The adapter's page once it serves `series`; fails at once if the process exits."""
    seen = eventually(lambda: _metrics(url), lambda seen: series in seen or proc.poll() is not None,
                      timeout=60, what=f"{what} on /metrics")
    assert proc.poll() is None, proc.communicate()
    return seen


def test_serves_the_gateway_series_and_exits_0_on_sigterm() -> None:
    port = free_port()
    with serving((FIXTURES / "llmgw.txt").read_bytes()) as gateway_url, command_process(
            "poolscope.exporters.proxy", "--gateway", "llmgw", "--gateway-metrics-url", gateway_url,
            "--pool-label", "--sample-interval", "0.2",
            "--listen", f"127.0.0.1:{port}") as proc:
        base = f"http://127.0.0.1:{port}"
        chat = {"proxy_id": "chat", "source": "gateway:llmgw"}
        alive = _series("poolscope_proxy_pool_instances_alive", **chat)
        page = _served(f"{base}/metrics", proc, alive, "the llmgw-derived series")
        assert page[alive] == 2
        assert page[_series("poolscope_proxy_pool_inflight_requests", **chat)] == 40
        batch = {"proxy_id": "batch", "source": "gateway:llmgw"}
        assert page[_series("poolscope_proxy_pool_instances_stale", **batch)] == 1
        assert page[_series("poolscope_proxy_collector_success", proxy_id="chat",
                            source="exporter", collector="gateway")] == 1
        with urllib.request.urlopen(f"{base}/healthz", timeout=5) as r:
            assert json.load(r) == {"status": "ok", "gateway": "llmgw"}
        # The short path: one pool's load report from the latest reading, received as a
        # Scheduler receives an embedded Proxy's, aged by when the page was read.
        with urllib.request.urlopen(f"{base}/v1/pool_load/chat", timeout=5) as r:
            received = time.time()
            report = receive_report(json.load(r), received)
        assert (report.proxy_id, report.pool.load.inflight_total) == ("chat", 40)
        assert report.pool.load.capacity is None  # a gateway does not know it
        assert received - 1.0 <= report.measured_at <= received
        for pool, status in (("nowhere", 404), ("{x}", 400)):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(f"{base}/v1/pool_load/{pool}", timeout=5)
            assert refused.value.code == status
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        _, stderr = proc.communicate()
        assert f"serving http://127.0.0.1:{port}" in stderr


def test_a_pool_label_adapter_never_read_says_so_on_metrics() -> None:
    """Before its first good read a --pool-label adapter knows no pool, yet its
    /metrics shows the gateway collector failing, under no pool (proxy_id=""),
    which is what the collector-failing alert fires on; once the llm-d router's
    page (its llm_d_epp_* names only) answers, the pool's series replace it."""
    page = Page(without_families(fixture_text(LLM_D), "inference_").encode(), status=503)
    port = free_port()
    with serving(page) as gateway_url, command_process(
            "poolscope.exporters.proxy", "--gateway", "gie", "--gateway-metrics-url", gateway_url,
            "--pool-label", "--sample-interval", "0.2", "--listen", f"127.0.0.1:{port}") as proc:
        url = f"http://127.0.0.1:{port}/metrics"
        no_pool = {"proxy_id": "", "source": "exporter", "collector": "gateway"}
        failing = _series("poolscope_proxy_collector_success", **no_pool)
        seen = _served(url, proc, failing, "the gateway collector's failure")
        assert seen[failing] == 0
        assert seen[_series("poolscope_proxy_collector_errors_total", **no_pool,
                            reason="http_status")] >= 1
        assert not [name for name, _ in seen if name.startswith("poolscope_proxy_pool_")]

        page.status = 200
        pool = {"proxy_id": LLM_D_POOL, "source": "gateway:gie"}
        alive = _series("poolscope_proxy_pool_instances_alive", **pool)
        seen = _served(url, proc, alive, "the llm-d router's pool")
        assert seen[alive] == 3
        assert seen[_series("poolscope_proxy_pool_inflight_requests", **pool)] == 25
        assert seen[_series("poolscope_proxy_requests_total", **pool, outcome="any")] == 23642
        assert seen[_series("poolscope_proxy_collector_success", proxy_id=LLM_D_POOL,
                            source="exporter", collector="gateway")] == 1
        assert not [labels for name, labels in seen
                    if name.startswith("poolscope_proxy_") and ("proxy_id", "") in labels]


def test_busy_port_exits_1() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        result = run(*BASE, "--proxy-id", "p1", "--listen", f"127.0.0.1:{s.getsockname()[1]}")
    assert result.returncode == 1
    assert "cannot listen" in result.stderr


@pytest.mark.parametrize("proxy_id", ['a"b', "x" * 129, "two words"])
def test_a_proxy_id_that_cannot_be_a_label_value_as_is_is_refused(proxy_id: str) -> None:
    with pytest.raises(UsageError, match="--proxy-id"):
        parse([*BASE, "--proxy-id", proxy_id])


def _first_read(url: str, proc: subprocess.Popen[str]) -> dict[Series, float]:
    """The adapter's page once its first read is done, good or not (its collector's
    success series is there either way); fails at once if the process exits."""
    return eventually(
        lambda: _metrics(url),
        lambda seen: proc.poll() is not None
        or any(name == "poolscope_proxy_collector_success" for name, _ in seen),
        timeout=60, what="the gateway collector's first read on /metrics")


def _pool_series(page: dict[Series, float]) -> list[Series]:
    return [s for s in page if s[0].startswith("poolscope_proxy_pool_")]


def _refused(gateway: str, page: bytes, reason: str) -> str:
    """The real adapter reading `page`: its first read fails with `reason`, health under
    no pool and no pool's series; what it logged."""
    port = free_port()
    with serving(page) as gateway_url, command_process(
            "poolscope.exporters.proxy", "--gateway", gateway, "--gateway-metrics-url",
            gateway_url, "--pool-label", "--sample-interval", "0.2",
            "--listen", f"127.0.0.1:{port}") as proc:
        seen = _first_read(f"http://127.0.0.1:{port}/metrics", proc)
        assert proc.poll() is None, proc.communicate()
        no_pool = {"proxy_id": "", "source": "exporter", "collector": "gateway"}
        assert seen[_series("poolscope_proxy_collector_success", **no_pool)] == 0
        assert seen[_series("poolscope_proxy_collector_errors_total", **no_pool,
                            reason=reason)] >= 1
        assert _pool_series(seen) == []
        proc.send_signal(signal.SIGTERM)
        return proc.communicate(timeout=30)[1]


@pytest.mark.parametrize(("fixture", "line"), [
    ("gie_epp_objective", 'inference_pool_ready_pods{name="vllm-llama3-8b-instruct"} 3'),
    (LLM_D, f'llm_d_epp_ready_endpoints{{name="{LLM_D_POOL}"}} 3'),
], ids=["gie", "llm-d"])
def test_an_absurd_ready_count_fails_the_read_instead_of_a_pool_of_1e12(fixture: str,
                                                                       line: str) -> None:
    text = fixture_text(fixture)
    assert text.count(line) == 1
    page = text.replace(line, line.removesuffix(" 3") + " 1e+12").encode()
    stderr = _refused("gie", page, "invalid_value")
    assert "invalid_value" in stderr and "1000000000000.0" in stderr, stderr


def test_a_duplicated_inflight_line_is_refused_not_counted_twice() -> None:
    """batch-0's inflight line twice: counted, batch would read 44 in flight where the
    router has 22; the page is refused as the engine reader refuses it."""
    line = 'llmgw_endpoint_inflight{pool="batch",replica="batch-0"} 22'
    text = fixture_text("llmgw")
    assert text.count(line) == 1
    page = text.replace(line, f"{line}\n{line}").encode()
    assert "duplicate series" in _refused("llmgw", page, "parse")


def test_one_endpoint_with_an_unusable_pool_is_left_out_and_counted() -> None:
    """chat-2's pool is `<script>alert(1)</script>` in every family: from the first read
    on, chat (without chat-2) and batch are read, the skipped series are counted
    beside the health series, and the log names the label once."""
    text = fixture_text("llmgw")
    endpoint = '{pool="chat",replica="chat-2"}'
    assert text.count(endpoint) == 7
    page = text.replace(endpoint, '{pool="<script>alert(1)</script>",replica="chat-2"}').encode()
    port = free_port()
    with serving(page) as gateway_url, command_process(
            "poolscope.exporters.proxy", "--gateway", "llmgw", "--gateway-metrics-url",
            gateway_url, "--pool-label", "--sample-interval", "0.2",
            "--listen", f"127.0.0.1:{port}") as proc:
        url = f"http://127.0.0.1:{port}/metrics"
        seen = _first_read(url, proc)
        assert proc.poll() is None, proc.communicate()
        for pool, registered, alive, inflight in (("chat", 2, 1, 14 + 9), ("batch", 2, 1, 22)):
            ids = {"proxy_id": pool, "source": "gateway:llmgw"}
            assert seen[_series("poolscope_proxy_pool_instances_registered", **ids)] == registered
            assert seen[_series("poolscope_proxy_pool_instances_alive", **ids)] == alive
            assert seen[_series("poolscope_proxy_pool_inflight_requests", **ids)] == inflight
            health = {"proxy_id": pool, "source": "exporter"}
            assert seen[_series("poolscope_proxy_collector_success", **health,
                                collector="gateway")] == 1
            # chat-2's inflight, stale and breaker series, once per read so far.
            skipped = seen[_series("poolscope_proxy_gateway_series_skipped_total", **health,
                                   reason="invalid_pool")]
            assert skipped > 0 and skipped % 3 == 0
        assert not [labels for _, labels in seen if ("proxy_id", "") in labels]
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    assert stderr.count("series left out") == 1, stderr
    assert "<script>alert(1)</script>" in stderr


# A pool this large takes the adapter seconds to read on a loaded 2-core machine
# (docs/reliability.md has the figures): read on the event loop, it held /healthz
# for as long. Large enough for that to show, small enough to be quick.
LARGE_POOL = 20_000
# What a Kubernetes liveness probe and a Prometheus scrape give the adapter.
LIVENESS_PROBE_S = 1.0
SCRAPE_TIMEOUT_S = 5.0
# How often the test's scraper asks: a busy HA pair's worth, not a scrape per instant
# (rendering 60,000 series back to back would only slow the reads down).
SCRAPE_EVERY_S = 0.5
_READ_DURATION = re.compile(rb'^poolscope_proxy_collector_duration_seconds\{collector="gateway",'
                            rb'proxy_id="chat",source="exporter"\} (\S+)$', re.MULTILINE)


def _timed_get(url: str) -> tuple[float, bytes]:
    start = time.monotonic()
    with urllib.request.urlopen(url, timeout=30) as r:
        body = r.read()
    return time.monotonic() - start, body


# Times /healthz and /metrics against a probe's and a scrape's timeout while the adapter
# parses: with the two cores to itself (`make test` runs `alone` tests after the rest).
@pytest.mark.alone
def test_a_large_page_is_read_while_healthz_and_metrics_keep_answering() -> None:
    """While the adapter reads a page of 20,000 endpoints, read after read, every
    /healthz answers within a liveness probe's second and every /metrics (one
    scraper, its page carrying the 60,000 member series) within a scrape timeout."""
    page = many_endpoints(fixture_text("llmgw"), LARGE_POOL).encode()
    registered = (b'poolscope_proxy_pool_instances_registered{proxy_id="chat",'
                  b'source="gateway:llmgw"} ' + str(float(LARGE_POOL + 3)).encode())
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    # The read's own timeout is roomy: what is tested is that the loop answers while
    # reads run, not how fast a loaded machine reads.
    with serving(page) as gateway_url, command_process(
            "poolscope.exporters.proxy", "--gateway", "llmgw", "--gateway-metrics-url",
            gateway_url, "--pool-label", "--sample-interval", "0.2", "--gateway-timeout", "60",
            "--listen", f"127.0.0.1:{port}") as proc:
        wait_http(f"{base}/healthz", timeout=60)
        scrapes: list[float] = []
        reads: set[bytes] = set()  # each read's duration: a new value is a read done
        done = threading.Event()

        def scrape() -> None:
            while not done.is_set():
                took, body = _timed_get(f"{base}/metrics")
                scrapes.append(took)
                if registered in body:
                    reads.update(_READ_DURATION.findall(body))
                done.wait(SCRAPE_EVERY_S)

        scraper = threading.Thread(target=scrape, daemon=True)
        scraper.start()
        healthz: list[float] = []

        def ask_healthz() -> int:
            healthz.append(_timed_get(f"{base}/healthz")[0])
            return len(reads)

        try:
            # Three reads done while /healthz is asked: it was asked through two whole
            # reads at least (the adapter reads back to back: a read outlasts the interval).
            eventually(ask_healthz,
                       lambda n: n >= 3 or proc.poll() is not None or not scraper.is_alive(),
                       timeout=120, what="three reads of the large page", every=0.05)
        finally:
            done.set()
            scraper.join(timeout=60)
        assert proc.poll() is None, proc.communicate()
        assert len(reads) >= 3, "the scraper stopped"
        assert max(healthz) < LIVENESS_PROBE_S, sorted(healthz)[-5:]
        assert max(scrapes) < SCRAPE_TIMEOUT_S, sorted(scrapes)[-5:]
