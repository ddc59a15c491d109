"""Gateway mode of the Proxy exporter: a gateway's own /metrics page read as
Poolscope's Proxy-side series, from the real-shaped fixtures in
tests/fixtures/gateways/ (README.md there gives the ground truth), and every way
a gateway can go wrong, over HTTP on loopback with the real sampling loop."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from harness.gateway_pages import LLM_D, LLM_D_POOL, fixture_text, without_families
from harness.prometheus import free_port
from poolscope.contract import catalog as c
from poolscope.contract.thresholds import FRESH_S
from poolscope.exporters.common.health import ErrorReason
from poolscope.exporters.common.plausible import MAX_POOL_MEMBERS, MAX_POOL_REQUESTS
from poolscope.exporters.common.sampling import SampleError
from poolscope.exporters.proxy.__main__ import parse
from poolscope.exporters.proxy.gateway import (
    NO_POOL,
    GatewayExporter,
    GatewayReader,
    reading_families,
)
from poolscope.exporters.proxy.gateways import GATEWAYS
from poolscope.exporters.proxy.gateways.pool import PoolReading, Pools
from poolscope.service.argtypes import UsageError
from tests.proxy.conftest import until

# The endpoint picker's pages: the llm-d router's (both its generations of names),
# then GIE's v1.5.0 and v1.0.2.
GIE_FIXTURES = (LLM_D, "gie_epp_objective", "gie_epp_model")

# What a gateway reading publishes: every one of these is absent while the gateway fails.
STATE_FAMILIES = (
    c.POOL_INSTANCES_REGISTERED, c.POOL_INSTANCES_ALIVE, c.POOL_INSTANCES_STALE,
    c.POOL_INFLIGHT, c.PROXY_QUEUE_DEPTH, c.PROXY_REQUESTS,
    c.PROXY_INSTANCE_REGISTERED, c.PROXY_INSTANCE_ALIVE, c.PROXY_INSTANCE_INFLIGHT)
STATE_NAMES = frozenset(f.name for f in STATE_FAMILIES)
HEALTH = {"source": c.SOURCE_EXPORTER, "collector": "gateway"}
# Where a loop-driven wait gives up: a hang guard on a busy machine, not a timing check.
WAIT_S = 30.0
# The gateway read timeout of a test whose gateway never hangs: far past any stall a
# busy machine puts into a loopback read, so a healthy read never times out.
HEALTHY_TIMEOUT_S = 10.0
# The timeout of the one case that makes the gateway hang: short, so the test is quick.
HANG_TIMEOUT_S = 1.0
# Fixture lines the mutations below rewrite.
LLMGW_INFLIGHT = 'llmgw_endpoint_inflight{pool="chat",replica="chat-0"} 14'
GIE_RUNNING = 'inference_objective_running_requests{model_name="food-review"} 8'
GIE_READY = 'inference_pool_ready_pods{name="vllm-llama3-8b-instruct"} 3'

Labels = dict[str, str]
Samples = dict[str, list[tuple[Labels, float]]]
T = TypeVar("T")


def samples_of(text: str) -> Samples:
    """Every sample of an exposition page by sample name, read with client_python's
    own parser (not the product's), so the expectations below state their ground truth."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def read(gateway: str, text: str, pools: Pools) -> dict[str, PoolReading]:
    return {r.proxy_id: r for r in GATEWAYS[gateway].interpret(text, pools).pools}


def reading_error(gateway: str, text: str, pools: Pools) -> SampleError:
    with pytest.raises(SampleError) as err:
        read(gateway, text, pools)
    return err.value


def swap(text: str, old: str, new: str) -> str:
    """`text` with its one occurrence of `old` replaced: a mutation that silently
    missed would make its test vacuous."""
    assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times"
    return text.replace(old, new)


def revalue(line: str, value: str) -> Callable[[str], str]:
    """A mutation: the page with the sample `line` given `value` instead."""
    series = line.rsplit(" ", 1)[0]
    return lambda text: swap(text, line, f"{series} {value}")


# --- ground truth, from the fixture text --------------------------------------

@dataclass(frozen=True)
class Truth:
    registered: float
    alive: float
    stale: float | None
    inflight: float
    members: frozenset[str]


def llmgw_truth(text: str) -> tuple[dict[str, Truth], float]:
    """Per pool from llmgw's endpoint families, plus the admission bands' total.

    A member is alive when its metrics are fresh and its breaker is closed."""
    s = samples_of(text)
    inflight = {(lb["pool"], lb["replica"]): v for lb, v in s["llmgw_endpoint_inflight"]}
    down = {(lb["pool"], lb["replica"]) for name in ("llmgw_endpoint_metrics_stale",
                                                     "llmgw_endpoint_breaker_open")
            for lb, v in s[name] if v == 1}
    pools: dict[str, Truth] = {}
    for pool in sorted({p for p, _ in inflight}):
        members = {r for p, r in inflight if p == pool}
        alive = len({r for r in members if (pool, r) not in down})
        pools[pool] = Truth(len(members), alive, len(members) - alive,
                            sum(v for (p, _), v in inflight.items() if p == pool),
                            frozenset(members))
    admission = sum(v for _, v in s["llmgw_admission_queue_depth"])
    return pools, admission


@dataclass(frozen=True)
class EppNames:
    """One generation of the EPP's names (the fixtures README lists them)."""

    members: str
    endpoint: str  # the members family's label naming the endpoint
    ready: str
    running: str
    requests: str


LLM_D_NAMES = EppNames("llm_d_epp_per_endpoint_queue_size", "model_server_endpoint",
                       "llm_d_epp_ready_endpoints", "llm_d_epp_request_running",
                       "llm_d_epp_request_total")
OBJECTIVE_NAMES = EppNames("inference_pool_per_pod_queue_size", "model_server_pod",
                           "inference_pool_ready_pods", "inference_objective_running_requests",
                           "inference_objective_request_total")
MODEL_NAMES = EppNames(OBJECTIVE_NAMES.members, OBJECTIVE_NAMES.endpoint, OBJECTIVE_NAMES.ready,
                       "inference_model_running_requests", "inference_model_request_total")
# The generation each fixture is read by: the llm-d router's page carries the two newest.
FIXTURE_NAMES = {LLM_D: LLM_D_NAMES, "gie_epp_objective": OBJECTIVE_NAMES,
                 "gie_epp_model": MODEL_NAMES}


def gie_truth(text: str, names: EppNames) -> tuple[str, Truth, float]:
    """The one pool of an EPP page, by one generation's names: its name, counts and
    request total."""
    s = samples_of(text)
    (ready_labels, ready), = s[names.ready]
    pods = frozenset(lb[names.endpoint] for lb, _ in s[names.members])
    truth = Truth(float(len(pods)), ready, None, sum(v for _, v in s[names.running]), pods)
    return ready_labels["name"], truth, sum(v for _, v in s[names.requests])


def fixture_truth(fixture: str) -> tuple[str, Truth, float]:
    return gie_truth(fixture_text(fixture), FIXTURE_NAMES[fixture])


def test_the_fixture_sums_are_the_readme_s() -> None:
    """The sums computed from the fixture text are the ones tests/fixtures/gateways/README.md
    states, so neither can drift from the other unnoticed."""
    pools, admission = llmgw_truth(fixture_text("llmgw"))
    assert {p: (t.registered, t.alive, t.stale, t.inflight) for p, t in pools.items()} == {
        "chat": (3, 2, 1, 40), "batch": (2, 1, 1, 22)}
    assert admission == 44
    for name in GIE_FIXTURES:
        pool, truth, requests = fixture_truth(name)
        assert pool == "vllm-llama3-8b-instruct"
        assert (truth.registered, truth.alive, truth.inflight, requests) == (3, 3, 25, 23642)
    # The llm-d router publishes its deprecated GIE names with the same values.
    assert gie_truth(fixture_text(LLM_D), OBJECTIVE_NAMES) == fixture_truth(LLM_D)


def assert_reading(reading: PoolReading, truth: Truth) -> None:
    assert reading.registered == truth.registered
    assert reading.alive == truth.alive
    assert reading.stale == truth.stale
    assert reading.inflight == pytest.approx(truth.inflight)
    assert set(reading.endpoints) == truth.members


# --- llmgw --------------------------------------------------------------------

def test_llmgw_by_pool_label_reads_one_pool_per_label_value() -> None:
    text = fixture_text("llmgw")
    truth, _ = llmgw_truth(text)
    readings = read("llmgw", text, Pools(label="pool"))
    assert set(readings) == set(truth) == {"chat", "batch"}
    for pool, reading in readings.items():
        assert_reading(reading, truth[pool])
        # The admission bands are the router's, not one pool's: no queue in this mode.
        assert reading.queue_depth == {}
        # llmgw's endpoint collector keeps no request counter.
        assert reading.requests_total is None
    chat, batch = readings["chat"], readings["batch"]
    assert (chat.registered, chat.alive, chat.stale, chat.inflight) == (3, 2, 1, 40)
    assert chat.endpoints["chat-1"].alive is False  # metrics stale
    # An open breaker is not free capacity: batch-1 is fresh but not alive.
    assert (batch.registered, batch.alive, batch.stale, batch.inflight) == (2, 1, 1, 22)
    assert batch.endpoints["batch-1"].alive is False
    assert batch.endpoints["batch-0"].inflight == 22


def test_llmgw_with_a_proxy_id_is_one_pool_with_the_admission_queue() -> None:
    text = fixture_text("llmgw")
    pools, admission = llmgw_truth(text)
    everything = Truth(sum(t.registered for t in pools.values()),
                       sum(t.alive for t in pools.values()),
                       sum(t.stale or 0.0 for t in pools.values()),
                       sum(t.inflight for t in pools.values()),
                       frozenset().union(*(t.members for t in pools.values())))
    readings = read("llmgw", text, Pools(proxy_id="p1"))
    assert set(readings) == {"p1"}
    assert_reading(readings["p1"], everything)
    assert readings["p1"].queue_depth == {"prepare": admission}
    assert (everything.registered, everything.alive, everything.stale, everything.inflight,
            admission) == (5, 3, 2, 62, 44)


def test_llmgw_without_admission_has_no_queue_series_rather_than_zero() -> None:
    text = "\n".join(line for line in fixture_text("llmgw").splitlines()
                     if not line.startswith("llmgw_admission_queue_depth")) + "\n"
    readings = read("llmgw", text, Pools(proxy_id="p1"))
    assert readings["p1"].queue_depth == {}
    assert not [m for m in reading_families(readings.values(), "gateway:llmgw")
                if m.name == c.PROXY_QUEUE_DEPTH.name]


def test_llmgw_member_without_liveness_flags_leaves_the_pool_counts_absent() -> None:
    text = fixture_text("llmgw")
    for name in ("llmgw_endpoint_metrics_stale", "llmgw_endpoint_breaker_open"):
        text = swap(text, f'{name}{{pool="batch",replica="batch-0"}} 0\n', "")
    readings = read("llmgw", text, Pools(label="pool"))
    batch = readings["batch"]
    # The router does not say whether batch-0 is alive: unknown, so the pool's
    # alive and stale are absent, never guessed; membership and inflight stay.
    assert batch.endpoints["batch-0"].alive is None
    assert (batch.registered, batch.alive, batch.stale, batch.inflight) == (2, None, None, 22)
    assert (readings["chat"].alive, readings["chat"].stale) == (2, 1)
    published = {(m.name, s.labels["proxy_id"]) for m in
                 reading_families(readings.values(), "gateway:llmgw") for s in m.samples}
    assert (c.POOL_INSTANCES_ALIVE.name, "batch") not in published
    assert (c.POOL_INSTANCES_STALE.name, "batch") not in published
    assert (c.POOL_INSTANCES_REGISTERED.name, "batch") in published



def test_llmgw_member_with_one_liveness_flag_is_not_called_alive() -> None:
    """A breaker the router does not report is unknown, not closed."""
    text = swap(fixture_text("llmgw"),
                'llmgw_endpoint_breaker_open{pool="batch",replica="batch-0"} 0\n', "")
    batch = read("llmgw", text, Pools(label="pool"))["batch"]
    assert batch.endpoints["batch-0"].alive is None
    assert (batch.alive, batch.stale) == (None, None)


# --- GIE (both generations) -----------------------------------------------------

@pytest.mark.parametrize("fixture", GIE_FIXTURES)
@pytest.mark.parametrize("mode", ["pool_label", "proxy_id"])
def test_gie_reads_ready_pods_running_and_requests(fixture: str, mode: str) -> None:
    text = fixture_text(fixture)
    pool, truth, requests = fixture_truth(fixture)
    pools = Pools(label="name") if mode == "pool_label" else Pools(proxy_id="p1")
    proxy_id = pool if mode == "pool_label" else "p1"
    readings = read("gie", text, pools)
    assert set(readings) == {proxy_id}
    reading = readings[proxy_id]
    assert_reading(reading, truth)
    assert (reading.registered, reading.alive, reading.inflight) == (3, 3, 25)
    # The EPP keeps no per-endpoint liveness: stale is unknown, not 0.
    assert reading.stale is None
    assert all(e.alive is None and e.inflight is None for e in reading.endpoints.values())
    assert reading.requests_total == requests == 23642
    assert reading.queue_depth == {}

    page = published_page(readings.values(), "gie")
    assert value(page, "poolscope_proxy_requests_total", proxy_id=proxy_id,
                 source="gateway:gie", outcome=c.OUTCOME_ANY) == 23642
    assert value(page, c.POOL_INSTANCES_ALIVE.name, proxy_id=proxy_id,
                 source="gateway:gie") == 3
    assert c.POOL_INSTANCES_STALE.name not in page
    assert c.PROXY_INSTANCE_ALIVE.name not in page
    assert c.PROXY_INSTANCE_INFLIGHT.name not in page


def test_gie_ready_endpoint_not_yet_listed_per_pod_is_still_a_member() -> None:
    text = fixture_text("gie_epp_objective")
    text = swap(text, GIE_READY, GIE_READY.replace(" 3", " 4"))
    reading = read("gie", text, Pools(label="name"))["vllm-llama3-8b-instruct"]
    assert (reading.registered, reading.alive, len(reading.endpoints)) == (4, 4, 3)


def test_gie_page_with_two_pools_leaves_the_model_level_series_out() -> None:
    """The model families carry no pool label: with two pools on one page they belong
    to neither, so inflight and requests are absent for both, never split or doubled."""
    text = fixture_text("gie_epp_objective")
    last_pod = ('inference_pool_per_pod_queue_size{model_server_pod="vllm-llama3-8b-instruct-'
                '7d9f5c6b8-klmno-rank-0",name="vllm-llama3-8b-instruct"} 5\n')
    text = swap(text, last_pod, last_pod + 'inference_pool_per_pod_queue_size{'
                'model_server_pod="other-0",name="other"} 1\n')
    text = swap(text, GIE_READY + "\n", GIE_READY + '\ninference_pool_ready_pods{name="other"} 1\n')
    readings = read("gie", text, Pools(label="name"))
    assert set(readings) == {"vllm-llama3-8b-instruct", "other"}
    assert all(r.inflight is None and r.requests_total is None for r in readings.values())
    assert (readings["other"].registered, readings["other"].alive) == (1, 1)
    assert (readings["vllm-llama3-8b-instruct"].registered,
            readings["vllm-llama3-8b-instruct"].alive) == (3, 3)


# --- the published page ---------------------------------------------------------

class _Readings(Collector):
    def __init__(self, readings: list[PoolReading], source: str) -> None:
        self.readings = readings
        self.source = source

    def collect(self) -> Iterator[Metric]:
        return reading_families(self.readings, self.source)


def published_page(readings: Iterable[PoolReading], gateway: str) -> Samples:
    """The readings as client_python renders them, parsed back."""
    registry = CollectorRegistry()
    registry.register(_Readings(list(readings), c.gateway_source(gateway)))
    return samples_of(generate_latest(registry).decode())


def value(page: Samples, name: str, **labels: str) -> float | None:
    found = [v for lb, v in page.get(name, []) if lb == labels]
    assert len(found) <= 1, f"{name}{labels} published {len(found)} times"
    return found[0] if found else None


CASES = [("llmgw", "llmgw", Pools(label="pool")), ("llmgw", "llmgw", Pools(proxy_id="p1")),
         *(("gie", f, p) for f in GIE_FIXTURES
           for p in (Pools(label="name"), Pools(proxy_id="p1")))]


@pytest.mark.parametrize(("gateway", "fixture", "pools"), CASES,
                         ids=[f"{f}-{'label' if p.label else 'id'}" for _, f, p in CASES])
def test_published_page_is_exactly_the_catalog_families(gateway: str, fixture: str,
                                                        pools: Pools) -> None:
    readings = list(read(gateway, fixture_text(fixture), pools).values())
    registry = CollectorRegistry()
    registry.register(_Readings(readings, c.gateway_source(gateway)))
    text = generate_latest(registry).decode()
    catalog = {f.name: f for f in c.all_families()}
    families = list(text_string_to_metric_families(text))  # client_python's own parser
    assert families
    for family in families:
        name = family.name + ("_total" if family.type == "counter" else "")
        assert name in STATE_NAMES, name
        assert family.type == catalog[name].kind, name
        assert family.documentation == catalog[name].help, name
        for s in family.samples:
            assert s.name == name
            assert tuple(sorted(s.labels)) == tuple(sorted(catalog[name].labels)), s
            assert s.labels["source"] == f"gateway:{gateway}", s
            assert s.labels["proxy_id"] in {r.proxy_id for r in readings}, s
            if "outcome" in s.labels:
                assert s.labels["outcome"] == c.OUTCOME_ANY
            if "queue" in s.labels:
                assert s.labels["queue"] in c.QUEUES
    # One series per pool and per member, each with its reading's value.
    page = samples_of(text)
    for r in readings:
        pool = {"proxy_id": r.proxy_id, "source": f"gateway:{gateway}"}
        assert value(page, c.POOL_INSTANCES_REGISTERED.name, **pool) == r.registered
        assert value(page, c.POOL_INSTANCES_ALIVE.name, **pool) == r.alive
        assert value(page, c.POOL_INSTANCES_STALE.name, **pool) == r.stale
        assert value(page, c.POOL_INFLIGHT.name, **pool) == r.inflight
        members = {lb["instance_id"] for lb, v in page[c.PROXY_INSTANCE_REGISTERED.name]
                   if lb["proxy_id"] == r.proxy_id and v == 1}
        assert members == set(r.endpoints)


# --- bad pages --------------------------------------------------------------------

LLMGW_MUTATIONS: list[tuple[str, Callable[[str], str], ErrorReason]] = [
    ("html", lambda t: "<html><body>502 Bad Gateway</body></html>", ErrorReason.PARSE),
    ("json", lambda t: '{"status": "ok"}', ErrorReason.PARSE),
    ("unclosed-labels", lambda t: swap(t, LLMGW_INFLIGHT, LLMGW_INFLIGHT.replace("} ", " ")),
     ErrorReason.PARSE),
    ("bad-number", lambda t: swap(t, LLMGW_INFLIGHT, LLMGW_INFLIGHT.replace(" 14", " 1x4")),
     ErrorReason.PARSE),
    ("empty", lambda t: "", ErrorReason.PARSE),
    # A page of another program (here: the GIE's) is not llmgw's.
    ("no-llmgw-families", lambda t: fixture_text("gie_epp_objective"), ErrorReason.PARSE),
    ("only-go-process", lambda t: "\n".join(
        ln for ln in t.splitlines() if "llmgw_" not in ln) + "\n", ErrorReason.PARSE),
    ("nan", lambda t: swap(t, LLMGW_INFLIGHT, LLMGW_INFLIGHT.replace(" 14", " NaN")),
     ErrorReason.INVALID_VALUE),
    ("inf", lambda t: swap(t, LLMGW_INFLIGHT, LLMGW_INFLIGHT.replace(" 14", " +Inf")),
     ErrorReason.INVALID_VALUE),
    ("negative", lambda t: swap(t, LLMGW_INFLIGHT, LLMGW_INFLIGHT.replace(" 14", " -3")),
     ErrorReason.INVALID_VALUE),
    ("stale-2", lambda t: swap(t, 'llmgw_endpoint_metrics_stale{pool="chat",replica="chat-0"} 0',
                               'llmgw_endpoint_metrics_stale{pool="chat",replica="chat-0"} 2'),
     ErrorReason.INVALID_VALUE),
    ("breaker-2", lambda t: swap(t, 'llmgw_endpoint_breaker_open{pool="chat",replica="chat-2"} 0',
                                 'llmgw_endpoint_breaker_open{pool="chat",replica="chat-2"} 2'),
     ErrorReason.INVALID_VALUE),
    ("breaker-half", lambda t: swap(t, 'llmgw_endpoint_breaker_open{pool="batch",'
                                       'replica="batch-0"} 0',
                                    'llmgw_endpoint_breaker_open{pool="batch",'
                                    'replica="batch-0"} 0.5'),
     ErrorReason.INVALID_VALUE),
    # Past the plausible ranges (exporters/common/plausible.py): one endpoint's inflight.
    ("absurd-inflight", revalue(LLMGW_INFLIGHT, "1e+12"), ErrorReason.INVALID_VALUE),
    ("fractional-inflight", revalue(LLMGW_INFLIGHT, "2.5"), ErrorReason.INVALID_VALUE),
    # A series twice is one measurement counted twice: refused as the engine reader does.
    ("duplicate-inflight", lambda t: swap(t, LLMGW_INFLIGHT, f"{LLMGW_INFLIGHT}\n{LLMGW_INFLIGHT}"),
     ErrorReason.PARSE),
]


@pytest.mark.parametrize(("mutate", "reason"), [(m, r) for _, m, r in LLMGW_MUTATIONS],
                         ids=[i for i, _, _ in LLMGW_MUTATIONS])
@pytest.mark.parametrize("pools", [Pools(label="pool"), Pools(proxy_id="p1")],
                         ids=["label", "id"])
def test_bad_llmgw_pages_fail_with_a_reason(mutate: Callable[[str], str], reason: ErrorReason,
                                            pools: Pools) -> None:
    err = reading_error("llmgw", mutate(fixture_text("llmgw")), pools)
    assert err.reason is reason
    assert err.detail and str(err).startswith(f"{reason.value}: ")


@pytest.mark.parametrize("pools", [Pools(label="pool"), Pools(proxy_id="p1")],
                         ids=["label", "id"])
def test_llmgw_flag_of_2_on_an_already_stale_endpoint_fails_the_sample(pools: Pools) -> None:
    text = swap(fixture_text("llmgw"),
                'llmgw_endpoint_breaker_open{pool="chat",replica="chat-1"} 0',
                'llmgw_endpoint_breaker_open{pool="chat",replica="chat-1"} 2')
    assert reading_error("llmgw", text, pools).reason is ErrorReason.INVALID_VALUE


GIE_MUTATIONS: list[tuple[str, Callable[[str], str], ErrorReason]] = [
    ("nan-running", lambda t: swap(t, GIE_RUNNING, GIE_RUNNING.replace(" 8", " NaN")),
     ErrorReason.INVALID_VALUE),
    ("negative-ready", lambda t: swap(t, GIE_READY, GIE_READY.replace(" 3", " -1")),
     ErrorReason.INVALID_VALUE),
    ("absurd-ready", revalue(GIE_READY, "1e+12"), ErrorReason.INVALID_VALUE),
    ("absurd-running", revalue(GIE_RUNNING, "1e+11"), ErrorReason.INVALID_VALUE),
    ("no-inference-families", lambda t: fixture_text("llmgw"), ErrorReason.PARSE),
    ("garbled", lambda t: t.replace("inference_pool_ready_pods{", "inference_pool_ready_pods{{"),
     ErrorReason.PARSE),
]


@pytest.mark.parametrize(("mutate", "reason"), [(m, r) for _, m, r in GIE_MUTATIONS],
                         ids=[i for i, _, _ in GIE_MUTATIONS])
def test_bad_gie_pages_fail_with_a_reason(mutate: Callable[[str], str],
                                          reason: ErrorReason) -> None:
    err = reading_error("gie", mutate(fixture_text("gie_epp_objective")), Pools(label="name"))
    assert err.reason is reason


def test_bad_values_outside_the_families_read_do_not_fail_the_sample() -> None:
    """As with an engine's page, what is read must be clean; a family the adapter does
    not read (the router's own KV or drain gauges, Go runtime series) cannot take
    every pool's membership down with it."""
    text = swap(fixture_text("llmgw"), "go_goroutines 96", "go_goroutines NaN")
    text = swap(text, "process_open_fds 64", "process_open_fds -1")
    text = swap(text, 'llmgw_endpoint_drain_rate{pool="chat",replica="chat-0"} 4.2',
                'llmgw_endpoint_drain_rate{pool="chat",replica="chat-0"} -4.2')
    text = swap(text, 'llmgw_endpoint_kv_cache_usage{pool="chat",replica="chat-0"} 0.61',
                'llmgw_endpoint_kv_cache_usage{pool="chat",replica="chat-0"} NaN')
    assert read("llmgw", text, Pools(label="pool"))["chat"].inflight == 40


HOSTILE_POOLS = {
    "quote-newline": 'ch\\"at\\nx',  # as the exposition format escapes them
    "backslash": "c\\\\hat",
    "space": "ch at",
    "braces": "chat}{",
    "unicode": "chät",
    "empty": "",
    "500-chars": "p" * 500,
}


@pytest.mark.parametrize("escaped", list(HOSTILE_POOLS.values()), ids=list(HOSTILE_POOLS))
def test_hostile_llmgw_pool_label_is_left_out_and_the_other_pools_read(escaped: str) -> None:
    text = fixture_text("llmgw").replace('pool="chat"', f'pool="{escaped}"')
    assert samples_of(text)  # still a well-formed page: only the value is hostile
    reading = GATEWAYS["llmgw"].interpret(text, Pools(label="pool"))
    (batch,) = reading.pools
    truth, _ = llmgw_truth(fixture_text("llmgw"))
    assert (batch.proxy_id, batch.registered, batch.inflight) == (
        "batch", truth["batch"].registered, truth["batch"].inflight)
    # chat's three endpoints, each in the three families read with the pool label.
    assert reading.skipped == 3 * 3
    assert reading.skipped_pool is not None and len(reading.skipped_pool) < 100  # cut
    # With --proxy-id the label names no pool, so the same page is fine.
    assert read("llmgw", text, Pools(proxy_id="p1"))["p1"].registered == 5


def test_a_page_whose_every_pool_label_is_unusable_fails() -> None:
    """Nothing on it is measured: the read fails, so the collector says why, rather
    than succeeding with no pool."""
    text = fixture_text("llmgw").replace('pool="chat"', 'pool="<script>alert(1)</script>"')
    text = text.replace('pool="batch"', 'pool="b a"')
    err = reading_error("llmgw", text, Pools(label="pool"))
    assert err.reason is ErrorReason.INVALID_VALUE
    assert "is not a usable proxy_id" in err.detail


@pytest.mark.parametrize("escaped", ['vllm\\"\\n', "x" * 500], ids=["quote-newline", "500"])
def test_hostile_gie_pool_name_is_refused_in_pool_label_mode(escaped: str) -> None:
    text = fixture_text("gie_epp_model").replace('name="vllm-llama3-8b-instruct"',
                                                 f'name="{escaped}"')
    assert reading_error("gie", text, Pools(label="name")).reason is ErrorReason.INVALID_VALUE
    assert read("gie", text, Pools(proxy_id="p1"))["p1"].alive == 3


def test_usable_pool_ids_are_accepted() -> None:
    text = fixture_text("llmgw").replace('pool="chat"', 'pool="eu-west-1.chat:v2_a"')
    text = text.replace('pool="batch"', f'pool="{"b" * 128}"')
    assert set(read("llmgw", text, Pools(label="pool"))) == {"eu-west-1.chat:v2_a", "b" * 128}


def test_pools_takes_exactly_one_of_proxy_id_and_label() -> None:
    with pytest.raises(ValueError):
        Pools()
    with pytest.raises(ValueError):
        Pools(proxy_id="p1", label="pool")


# --- over HTTP, with the sampling loop ----------------------------------------------

@dataclass
class FakeGateway:
    """A gateway /metrics endpoint on loopback whose answer each test scripts; it can
    go down and come back on the same port."""

    body: bytes = b""
    status: int = 200
    hang: bool = False
    delay: float = 0.0  # seconds the gateway takes to answer: a slow gateway, not a test sleep
    port: int = 0
    requests: int = 0
    authorization: str | None = None  # the last request's Authorization header
    _runner: web.AppRunner | None = None
    _release: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    async def handle(self, request: web.Request) -> web.Response:
        self.requests += 1
        self.authorization = request.headers.get("Authorization")
        if self.hang:
            await self._release.wait()
        if self.delay:
            await asyncio.sleep(self.delay)
        return web.Response(body=self.body, status=self.status,
                            content_type="text/plain", charset="utf-8")

    async def up(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self.handle)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port).start()
        self.port = runner.addresses[0][1]
        self._runner = runner

    async def down(self) -> None:
        self._release.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self._release = asyncio.Event()


@pytest.fixture
async def gateway_server() -> AsyncIterator[FakeGateway]:
    server = FakeGateway(body=fixture_text("llmgw").encode())
    await server.up()
    yield server
    await server.down()


MakeExporter = Callable[..., GatewayExporter]


@pytest.fixture
async def make_exporter() -> AsyncIterator[MakeExporter]:
    made: list[GatewayExporter] = []

    def make(gateway: str, url: str, pools: Pools, interval: float = 1.0,
             timeout: float = 2.0) -> GatewayExporter:
        exporter = GatewayExporter(GatewayReader(GATEWAYS[gateway], url, pools, timeout),
                                   interval)
        made.append(exporter)
        return exporter

    yield make
    for exporter in made:
        await exporter.stop()


def scrape(registry: CollectorRegistry) -> Samples:
    """What a scrape of the exporter serves, parsed back with client_python's parser."""
    return samples_of(generate_latest(registry).decode())


def health(page: Samples, name: str, proxy_id: str, **extra: str) -> float | None:
    return value(page, name, proxy_id=proxy_id, **HEALTH, **extra)


def errors(page: Samples, proxy_id: str) -> dict[str, float]:
    return {lb["reason"]: v for lb, v in page.get("poolscope_proxy_collector_errors_total", [])
            if lb["proxy_id"] == proxy_id and lb["collector"] == "gateway"}


def state_series(page: Samples) -> list[tuple[str, Labels, float]]:
    return [(name, lb, v) for name, series in page.items() if name in STATE_NAMES
            for lb, v in series]


def assert_llmgw_by_pool(page: Samples) -> None:
    truth, _ = llmgw_truth(fixture_text("llmgw"))
    for pool, t in truth.items():
        labels = {"proxy_id": pool, "source": "gateway:llmgw"}
        assert value(page, c.POOL_INSTANCES_REGISTERED.name, **labels) == t.registered
        assert value(page, c.POOL_INSTANCES_ALIVE.name, **labels) == t.alive
        assert value(page, c.POOL_INSTANCES_STALE.name, **labels) == t.stale
        assert value(page, c.POOL_INFLIGHT.name, **labels) == t.inflight
        assert health(page, "poolscope_proxy_collector_success", pool) == 1
    assert c.PROXY_QUEUE_DEPTH.name not in page


async def test_exporter_serves_the_gateway_and_goes_absent_while_it_fails(
        gateway_server: FakeGateway, make_exporter: MakeExporter) -> None:
    # No step here hangs, so the read timeout is roomy: a healthy read that a busy
    # machine stalls must not time out and count a `timeout` beside the step's reason.
    exporter = make_exporter("llmgw", gateway_server.url, Pools(label="pool"), interval=0.05,
                             timeout=HEALTHY_TIMEOUT_S)
    registry = exporter.registry()
    await exporter.start()  # one sample now, then the loop in the background
    page = scrape(registry)
    assert_llmgw_by_pool(page)
    pools = ("batch", "chat")
    # Every reason starts at a measured 0, so the first failure is an increase.
    assert errors(page, "chat") == {r.value: 0 for r in GatewayReader.reasons}

    async def answer_500() -> None:
        gateway_server.status = 500

    async def answer_garbage() -> None:
        gateway_server.body = b"<html><body>upstream connect error</body></html>"

    async def go_down() -> None:
        await gateway_server.down()

    async def restore() -> None:
        gateway_server.status, gateway_server.body = 200, fixture_text("llmgw").encode()
        if gateway_server._runner is None:
            await gateway_server.up()  # the same port: the gateway came back

    steps: list[tuple[Callable[[], Awaitable[None]], ErrorReason]] = [
        (answer_500, ErrorReason.HTTP_STATUS), (answer_garbage, ErrorReason.PARSE),
        (go_down, ErrorReason.CONNECTION)]
    for fail, reason in steps:
        before = {p: errors(scrape(registry), p) for p in pools}
        await fail()

        def failed(page: Samples, reason: ErrorReason = reason,
                   before: dict[str, dict[str, float]] = before) -> bool:
            return all(health(page, "poolscope_proxy_collector_success", p) == 0
                       and errors(page, p)[reason.value] > before[p][reason.value]
                       for p in pools)

        page = await until(lambda: scrape(registry), failed,
                           f"success 0 and a {reason.value} error for every pool", WAIT_S)
        # Measured or absent: not one state series is left, and none became a 0.
        assert state_series(page) == []
        for p in pools:
            rose = {r for r, v in errors(page, p).items() if v > before[p][r]}
            assert rose == {reason.value}, (reason, rose)
            # The age keeps counting from the last good read: freshness stays honest.
            assert health(page, "poolscope_proxy_collector_sample_age_seconds", p) is not None

        await restore()
        page = await until(
            lambda: scrape(registry),
            lambda page: all(health(page, "poolscope_proxy_collector_success", p) == 1
                             for p in pools) and bool(state_series(page)),
            f"the series back after {reason.value}", WAIT_S)
        assert_llmgw_by_pool(page)


async def test_fixed_pool_says_why_before_its_first_good_read(
        make_exporter: MakeExporter) -> None:
    """With --proxy-id the pool is known before the gateway ever answered: its health
    says the gateway is unreachable, and its series appear once it answers."""
    gateway = FakeGateway(body=fixture_text("gie_epp_model").encode(), port=free_port())
    exporter = make_exporter("gie", gateway.url, Pools(proxy_id="p1"), interval=0.05)
    registry = exporter.registry()
    await exporter.start()
    try:
        page = scrape(registry)
        assert health(page, "poolscope_proxy_collector_success", "p1") == 0
        assert errors(page, "p1")["connection"] >= 1
        assert state_series(page) == []
        # Never succeeded: no age (absent before the first success).
        assert health(page, "poolscope_proxy_collector_sample_age_seconds", "p1") is None
        await gateway.up()
        page = await until(lambda: scrape(registry),
                           lambda page: bool(state_series(page)), "the EPP's series",
                           WAIT_S)
        source = {"proxy_id": "p1", "source": "gateway:gie"}
        assert value(page, c.POOL_INSTANCES_ALIVE.name, **source) == 3
        assert value(page, c.POOL_INFLIGHT.name, **source) == 25
        assert value(page, "poolscope_proxy_requests_total", **source, outcome="any") == 23642
        assert c.POOL_INSTANCES_STALE.name not in page
        assert health(page, "poolscope_proxy_collector_success", "p1") == 1
    finally:
        await gateway.down()


async def test_pool_label_adapter_says_why_before_it_knows_a_pool(
        make_exporter: MakeExporter) -> None:
    """With --pool-label no pool is known until a read names one. The collector's
    health is published all the same, under no pool (proxy_id=""), so a gateway
    never read shows as a failing collector on /metrics, not as an empty page; the
    pool's own health replaces it once the gateway answers (here the llm-d
    router's page, its own names only)."""
    gateway = FakeGateway(body=without_families(fixture_text(LLM_D), "inference_").encode(),
                          port=free_port())
    exporter = make_exporter("gie", gateway.url, Pools(label="name"), interval=0.05)
    registry = exporter.registry()
    await exporter.start()
    try:
        page = scrape(registry)
        assert health(page, "poolscope_proxy_collector_success", NO_POOL) == 0
        assert errors(page, NO_POOL)["connection"] >= 1
        assert health(page, "poolscope_proxy_collector_sample_age_seconds", NO_POOL) is None
        assert state_series(page) == []
        await gateway.up()
        page = await until(lambda: scrape(registry),
                           lambda page: bool(state_series(page)), "the llm-d router's pool",
                           WAIT_S)
        assert health(page, "poolscope_proxy_collector_success", LLM_D_POOL) == 1
        assert {lb["proxy_id"] for name, series in page.items() for lb, _ in series
                if name.startswith("poolscope_proxy_")} == {LLM_D_POOL}
        source = {"proxy_id": LLM_D_POOL, "source": "gateway:gie"}
        assert value(page, c.POOL_INSTANCES_ALIVE.name, **source) == 3
        assert value(page, c.POOL_INFLIGHT.name, **source) == 25
    finally:
        await gateway.down()


async def test_a_read_that_names_no_pool_still_publishes_its_health(
        gateway_server: FakeGateway, make_exporter: MakeExporter) -> None:
    """A gateway with no pool to report (every llmgw endpoint in none) was read: its
    success is 1, under no pool, and nothing else is published."""
    gateway_server.body = fixture_text("llmgw").replace('pool="chat"', 'pool="none"').replace(
        'pool="batch"', 'pool="none"').encode()
    exporter = make_exporter("llmgw", gateway_server.url, Pools(label="pool"))
    registry = exporter.registry()
    await exporter.loop.sample_all()
    page = scrape(registry)
    assert health(page, "poolscope_proxy_collector_success", NO_POOL) == 1
    assert state_series(page) == []


def _status(code: int) -> Callable[[FakeGateway], None]:
    return lambda g: setattr(g, "status", code)


def _body(body: bytes) -> Callable[[FakeGateway], None]:
    return lambda g: setattr(g, "body", body)


FAILURES: list[tuple[str, Callable[[FakeGateway], None], ErrorReason]] = [
    ("500", _status(500), ErrorReason.HTTP_STATUS),
    ("404", _status(404), ErrorReason.HTTP_STATUS),
    ("html", _body(b"<html>502 Bad Gateway</html>"), ErrorReason.PARSE),
    ("not-utf8", _body(b"llmgw_endpoint_inflight{pool=\"\xff\xfe\"} 1\n"), ErrorReason.PARSE),
    ("nan", _body(swap(fixture_text("llmgw"), LLMGW_INFLIGHT,
                       LLMGW_INFLIGHT.replace(" 14", " NaN")).encode()),
     ErrorReason.INVALID_VALUE),
    # Every pool's label unusable: nothing on the page is measured.
    ("hostile-pools", _body(fixture_text("llmgw").replace('pool="chat"', 'pool="a\\"b"')
                            .replace('pool="batch"', 'pool="b a"').encode()),
     ErrorReason.INVALID_VALUE),
    ("hang", lambda g: setattr(g, "hang", True), ErrorReason.TIMEOUT),
]


@pytest.mark.parametrize(("setup", "reason"), [(s, r) for _, s, r in FAILURES],
                         ids=[i for i, _, _ in FAILURES])
async def test_each_failure_is_counted_under_its_reason(
        gateway_server: FakeGateway, make_exporter: MakeExporter,
        setup: Callable[[FakeGateway], None], reason: ErrorReason) -> None:
    # A short read timeout for the hang case only; every other case keeps a roomy one,
    # so its healthy read, and its failing one, cannot time out on a stalled machine.
    hangs = reason is ErrorReason.TIMEOUT
    exporter = make_exporter("llmgw", gateway_server.url, Pools(label="pool"),
                             timeout=HANG_TIMEOUT_S if hangs else HEALTHY_TIMEOUT_S)
    registry = exporter.registry()
    await exporter.loop.sample_all()
    page = scrape(registry)
    # The hang case's healthy read has the short timeout too, and a stall past it
    # counts a timeout: read again until one succeeds, and count from there.
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while hangs and not all(health(page, "poolscope_proxy_collector_success", p) == 1
                            for p in ("chat", "batch")):
        assert asyncio.get_running_loop().time() < deadline, "no healthy read"
        await exporter.loop.sample_all()
        page = scrape(registry)
    assert_llmgw_by_pool(page)
    before = {pool: errors(page, pool) for pool in ("chat", "batch")}
    if not hangs:
        assert all(v == 0 for e in before.values() for v in e.values()), before
    setup(gateway_server)
    await exporter.loop.sample_all()
    page = scrape(registry)
    assert state_series(page) == []
    for pool in ("chat", "batch"):
        assert health(page, "poolscope_proxy_collector_success", pool) == 0
        # The one failing read counted once, under its reason and no other.
        counted = {r: v - before[pool][r] for r, v in errors(page, pool).items()}
        assert counted == {r.value: int(r is reason) for r in GatewayReader.reasons}


async def test_a_read_within_the_gateway_timeout_succeeds(
        gateway_server: FakeGateway, make_exporter: MakeExporter) -> None:
    gateway_server.delay = 1.0
    exporter = make_exporter("llmgw", gateway_server.url, Pools(proxy_id="p1"),
                             interval=0.2, timeout=5.0)
    registry = exporter.registry()
    await exporter.loop.sample_all()
    page = scrape(registry)
    assert errors(page, "p1")["timeout"] == 0
    assert health(page, "poolscope_proxy_collector_success", "p1") == 1


async def test_a_long_sample_interval_is_refused_or_served_until_the_next_read(
        gateway_server: FakeGateway) -> None:
    interval = FRESH_S + 5
    try:
        config = parse(["--gateway", "llmgw", "--gateway-metrics-url", gateway_server.url,
                        "--proxy-id", "p1", "--sample-interval", str(interval)])
    except UsageError:
        return  # refused at startup: a fix as good as serving it
    exporter = GatewayExporter(config.reader, config.interval)
    try:
        registry = exporter.registry()
        now = [1000.0]
        # The health clock, moved by hand: the held sample ages without sleeping.
        exporter.slot.health._monotonic = lambda: now[0]
        await exporter.loop.sample_all()
        assert state_series(scrape(registry))
        now[0] += interval - 1  # the next read is due in a second
        assert state_series(scrape(registry))
    finally:
        await exporter.stop()


def test_llmgw_endpoints_in_no_pool_belong_to_none_with_a_pool_label() -> None:
    text = fixture_text("llmgw").replace('pool="batch"', 'pool="none"')
    assert set(read("llmgw", text, Pools(label="pool"))) == {"chat"}
    # With --proxy-id every endpoint is the one pool's, pool="none" or not.
    [(_, one)] = read("llmgw", text, Pools(proxy_id="p1")).items()
    assert one.registered == 5


async def test_a_pool_the_gateway_drops_leaves_its_health_series(
        gateway_server: FakeGateway, make_exporter: MakeExporter) -> None:
    exporter = make_exporter("llmgw", gateway_server.url, Pools(label="pool"))
    registry = exporter.registry()
    await exporter.loop.sample_all()
    assert health(scrape(registry), "poolscope_proxy_collector_success", "batch") == 1
    gateway_server.body = fixture_text("llmgw").replace('pool="batch"', 'pool="none"').encode()
    await exporter.loop.sample_all()
    page = scrape(registry)
    assert health(page, "poolscope_proxy_collector_success", "chat") == 1
    assert health(page, "poolscope_proxy_collector_success", "batch") is None


async def test_endpoints_a_rollout_replaced_leave_with_the_page(
        gateway_server: FakeGateway, make_exporter: MakeExporter) -> None:
    """The adapter keeps no member between reads: each read replaces the last, so after
    rollouts that rename every endpoint the page names the latest ones only (the gateway
    forgot the others, and so does the page; nothing is left to count as forgotten)."""
    exporter = make_exporter("llmgw", gateway_server.url, Pools(label="pool"))
    registry = exporter.registry()
    page_text = fixture_text("llmgw")
    per_member = (c.PROXY_INSTANCE_REGISTERED, c.PROXY_INSTANCE_ALIVE, c.PROXY_INSTANCE_INFLIGHT)
    listed = {e for r in read("llmgw", page_text, Pools(label="pool")).values()
              for e in r.endpoints}
    for rollout in range(3):
        gateway_server.body = page_text.replace('replica="', f'replica="r{rollout}-').encode()
        await exporter.loop.sample_all()
        page = scrape(registry)
        members = {lb["instance_id"] for family in per_member
                   for lb, _ in page.get(family.name, [])}
        assert members == {f"r{rollout}-{e}" for e in listed}


@pytest.mark.parametrize("fixture", GIE_FIXTURES)
def test_gie_page_without_pool_families_counts_no_members(fixture: str) -> None:
    """Model-level families alone say nothing of the members: no count, not 0."""
    text = "\n".join(ln for ln in fixture_text(fixture).splitlines()
                     if '{name="' not in ln and ',name="' not in ln) + "\n"  # the pool label
    [(_, pool)] = read("gie", text, Pools(proxy_id="p1")).items()
    assert (pool.registered, pool.alive, pool.stale) == (None, None, None)
    assert pool.inflight == 25  # what the page does say is kept


async def test_a_bearer_token_is_sent_to_the_gateway(gateway_server: FakeGateway) -> None:
    reader = GatewayReader(GATEWAYS["llmgw"], gateway_server.url, Pools(proxy_id="p1"), 2.0,
                           bearer_token="s3cret")
    try:
        await reader.read()
    finally:
        await reader.close()
    assert gateway_server.authorization == "Bearer s3cret"


def test_the_documented_gateway_ranges_are_the_adapters() -> None:
    """docs/gateways.md lists each family an adapter reads with its plausible range,
    row for row, from the adapters themselves (exporters/common/plausible.py)."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "gateways.md").read_text()
    rows = re.findall(r"^\| (\w+) \| `(\w+)` \| (.+?) \|$", doc, re.MULTILINE)
    assert rows == [(g.name, name, str(valid)) for g in GATEWAYS.values()
                    for name, valid in g.families.items()]


def test_a_pool_sum_past_its_range_fails_though_each_endpoint_is_plausible() -> None:
    reading = PoolReading("chat", registered=MAX_POOL_MEMBERS + 1.0)
    with pytest.raises(SampleError, match="pool chat: instances registered"):
        reading.check()
    with pytest.raises(SampleError) as err:
        PoolReading("chat", inflight=float(MAX_POOL_REQUESTS) * 2).check()
    assert err.value.reason is ErrorReason.INVALID_VALUE
