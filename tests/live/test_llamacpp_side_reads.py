"""The real llama-server where the exporter cannot read /props, and in router mode.

1. Behind a reverse proxy that passes only /metrics (as an ingress exposing the
   page to Prometheus does), /props answers 404. The exporter still publishes the
   load, its `engine_capacity` collector fails with `http_status`, and the capacity
   falls back to the learned one once requests have run.
2. A router (`--models-dir`, one child llama-server per model) read as one model's
   Instance through /metrics?model=NAME: reading never loads the model (an unloaded
   one is not measured, and stays unloaded); loaded, its load and its own slots are
   read.

Needs the llama-server that `make llama-server` builds (LLAMA_SERVER_DIR). Every
wait is a condition with a bound, never a fixed sleep.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TypeVar

import pytest
from prometheus_client.parser import text_string_to_metric_families

from deploy.demo.processes import port_or_free, wait_ready
from harness import llama_server
from harness.tiny_model import write_tiny_llama
from tests.live.test_llamacpp import (
    N_PREDICT,
    POOL,
    SLOT_CONTEXT,
    SLOTS,
    SOURCE,
    START_S,
    _llama_server_dir,
    tiny_llama_server,
)
from tests.live.test_llamacpp import _wait as wait_for
from tests.reliability.stack import Launcher, fetch

pytestmark = pytest.mark.integration

T = TypeVar("T")
MODEL = "tiny"
# A few exporter samples (1 s each) and a request of N_PREDICT tokens, slow machine or not.
BOUND_S = 30
REQUEST_TIMEOUT_S = 120


class _MetricsOnly(BaseHTTPRequestHandler):
    """Passes GET /metrics to the upstream llama-server; anything else is 404."""

    upstream = ""

    def do_GET(self) -> None:
        if self.path.split("?")[0] != "/metrics":
            self._answer(404, b"not found")
            return
        try:
            with urllib.request.urlopen(self.upstream + self.path, timeout=5) as r:
                self._answer(r.status, r.read())
        except urllib.error.HTTPError as e:
            self._answer(e.code, e.read())

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # one line per exporter read would bury the test's output


@dataclass(frozen=True)
class Scrape:
    """One scrape of the exporter: every sample as (name, labels, value)."""

    samples: tuple[tuple[str, dict[str, str], float], ...]

    def value(self, name: str, **labels: str) -> float | None:
        found = [v for n, got, v in self.samples
                 if n == name and all(got.get(k) == want for k, want in labels.items())]
        assert len(found) <= 1, (name, labels, found)
        return found[0] if found else None

    def collector(self, name: str, collector: str, **labels: str) -> float | None:
        return self.value(f"poolscope_collector_{name}", collector=collector, **labels)


def scrape(url: str) -> Scrape:
    status, _, body = fetch(url)
    assert status == 200, (status, body[:200])
    return Scrape(tuple((s.name, s.labels, s.value)
                        for family in text_string_to_metric_families(body.decode())
                        for s in family.samples))


def _wait(probe: Callable[[], T], ok: Callable[[T], bool], what: str) -> T:
    return wait_for(probe, ok, BOUND_S, what)


@dataclass
class Served:
    llama: str  # llama-server (or the router) itself
    exporter: str  # the exporter's /metrics


def _exporter(launcher: Launcher, instance_id: str, engine_metrics_url: str) -> str:
    port = port_or_free(0)
    child = launcher.group.start_python(
        f"exporter-{instance_id}", "poolscope.exporters.instance", "--instance-id", instance_id,
        "--proxy-id", POOL, "--listen", f"127.0.0.1:{port}",
        "--engine-metrics-url", engine_metrics_url, "--sample-interval", "1",
        "--engine-timeout", "1")
    wait_ready(f"http://127.0.0.1:{port}/healthz", child, timeout=START_S)
    return f"http://127.0.0.1:{port}/metrics"


@pytest.fixture(scope="module")
def behind_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with tiny_llama_server(tmp_path_factory.mktemp("live-llamacpp-proxy")) as (launcher, llama):
        handler = type("Handler", (_MetricsOnly,), {"upstream": llama})
        proxy = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        try:
            proxied = f"http://127.0.0.1:{proxy.server_address[1]}/metrics"
            yield Served(llama, _exporter(launcher, "llama-proxied", proxied))
        finally:
            proxy.shutdown()
            proxy.server_close()


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    directory = _llama_server_dir()
    workdir = tmp_path_factory.mktemp("live-llamacpp-router")
    models = workdir / "models"
    models.mkdir()
    write_tiny_llama(directory / llama_server.VOCAB, models / f"{MODEL}.gguf",
                     context_length=SLOT_CONTEXT)
    launcher = Launcher(workdir)
    try:
        llama = llama_server.serve(launcher.group, directory, models, slots=SLOTS,
                                   slot_context=SLOT_CONTEXT, timeout=START_S, router=True)
        yield Served(llama, _exporter(launcher, "llama-tiny", f"{llama}/metrics?model={MODEL}"))
    finally:
        launcher.stop()


def _predicted(base_url: str, query: str = "") -> float:
    page = llama_server.get(f"{base_url}/metrics{query}").decode()
    return llama_server.page_values(page)["llamacpp:tokens_predicted_total"]


def test_props_unreachable_still_publishes_the_load_with_the_capacity_reason(
        behind_proxy: Served) -> None:
    first = _wait(lambda: scrape(behind_proxy.exporter), lambda s: (
        s.collector("success", "engine") == 1
        and s.collector("success", "engine_capacity") == 0
        and (s.collector("errors_total", "engine_capacity", reason="http_status") or 0) >= 1),
        "the load read, /props failing with http_status")
    assert first.value("poolscope_engine_requests_running", source=SOURCE) == 0
    assert first.value("poolscope_engine_requests_waiting", source=SOURCE) == 0
    assert first.value("poolscope_instance_capacity_requests", source=SOURCE) is None
    assert first.collector("errors_total", "engine", reason="http_status") == 0

    # Two requests run at once: the load follows llama.cpp's, and the capacity is learned.
    with ThreadPoolExecutor(max_workers=SLOTS) as clients:
        futures = [clients.submit(llama_server.complete, behind_proxy.llama, f"Request {i}:",
                                  N_PREDICT, REQUEST_TIMEOUT_S) for i in range(SLOTS)]
        _wait(lambda: scrape(behind_proxy.exporter), lambda s: (
            s.value("poolscope_engine_requests_running", source=SOURCE) == SLOTS
            and s.value("poolscope_instance_capacity_requests", source="learned") == SLOTS),
            "both slots running, read through the proxy, and the capacity learned")
        for f in futures:
            f.result(timeout=REQUEST_TIMEOUT_S)
    done = _predicted(behind_proxy.llama)
    _wait(lambda: scrape(behind_proxy.exporter), lambda s: (
        s.value("poolscope_engine_generation_tokens_total", source=SOURCE) == done
        and s.collector("success", "engine_capacity") == 0),
        "the exporter's generated tokens equal llama.cpp's, /props still failing")


def test_router_model_is_read_without_loading_it(router: Served) -> None:
    one = f"?model={MODEL}&autoload=false"
    unloaded = _wait(lambda: scrape(router.exporter), lambda s: (
        (s.collector("errors_total", "engine", reason="http_status") or 0) >= 3),
        "three failed reads of the unloaded model")
    assert unloaded.collector("success", "engine") == 0
    assert unloaded.value("poolscope_engine_requests_running", source=SOURCE) is None
    assert llama_server.model_status(router.llama, MODEL) == "unloaded"

    llama_server.post_json(f"{router.llama}/models/load", {"model": MODEL})
    _wait(lambda: llama_server.model_status(router.llama, MODEL), lambda s: s == "loaded",
          f"{MODEL} loaded")
    loaded = _wait(lambda: scrape(router.exporter), lambda s: (
        s.collector("success", "engine") == 1
        and s.value("poolscope_instance_capacity_requests", source=SOURCE) == SLOTS),
        "the loaded model read, its own slots as capacity")
    assert loaded.value("poolscope_engine_requests_running", source=SOURCE) == 0

    llama_server.complete(router.llama, "Once upon a time", N_PREDICT, REQUEST_TIMEOUT_S,
                          model=MODEL)
    done = _predicted(router.llama, one)
    assert done >= N_PREDICT
    _wait(lambda: scrape(router.exporter), lambda s: (
        s.value("poolscope_engine_generation_tokens_total", source=SOURCE) == done),
        "the exporter's generated tokens equal the model's")
