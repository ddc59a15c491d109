"""Each membership source end to end: real exporters, a real Prometheus with rules/,
the Scheduler bridge, and the JSON compared with what the test set up.

- `solo`: no Proxy-side exporter, two Instance exporters declaring the pool;
- `chat` and `batch`: llmgw's router (its real page, served from the fixture) read
  by the gateway adapter; `chat` also has an Instance exporter of its own;
- `vllm-llama3-8b-instruct`: GIE's endpoint picker (its real page) read by the adapter;
- `emb`: the embedded Proxy library's registry, with the same EPP page claiming the
  pool through another adapter (the registry must win).

Faults: the gateway page answering 500, garbage or NaN (the pool's membership is
unknown, not replaced by a smaller self-declared one; its CPU stays measured), and a
member's exporter killed (it counts as stale, the survivor's CPU stays measured).

Rule groups are evaluated apart and one bridge answer can mix two evaluations, so
every field a test asserts is part of the condition it waits for.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from deploy.demo.processes import Child, port_or_free, stop_group
from harness.polling import eventually
from harness.prometheus import Prometheus, running_prometheus, scrape_config
from harness.static_http import Page, serving
from tests.reliability.stack import Launcher, Pool, fetch, fetch_json

pytestmark = pytest.mark.integration

GATEWAYS = Path(__file__).resolve().parents[1] / "fixtures" / "gateways"
LLMGW_PAGE = (GATEWAYS / "llmgw.txt").read_bytes()
EPP_POOL = "vllm-llama3-8b-instruct"  # the InferencePool of the EPP's page
# Bounds: a few scrapes (1 s), evaluations (1 s), gateway reads (1 s) and cache TTLs.
SETTLE_S = 60
RATE_SETTLE_S = 90  # a rate is kept once its 1m window is covered: ~52 s of scrapes
SHORT_BOUND_S = 20
MEASURED = object()  # an expectation: the field is not null


@dataclass
class Stack:
    prom: Prometheus
    bridge: str
    llmgw: Page
    adapter_metrics: str
    solo: Pool

    def summary(self, proxy_id: str) -> dict[str, Any] | None:
        status, body = fetch_json(f"{self.bridge}/v1/pool_resources/{proxy_id}")
        return body if status == 200 else None

    def settled(self, proxy_id: str, within: float = SETTLE_S,
                **expect: Any) -> dict[str, Any]:
        """The pool's summary once every `section__key=value` holds (MEASURED: not null)."""
        def ok(s: dict[str, Any] | None) -> bool:
            return s is not None and all(
                _get(s, path) is not None if value is MEASURED else _get(s, path) == value
                for path, value in expect.items())
        summary = eventually(lambda: self.summary(proxy_id), ok, within,
                             f"{proxy_id}: {expect}")
        assert summary is not None
        return summary


def _get(summary: dict[str, Any], path: str) -> Any:
    section, key = path.split("__")
    return summary[section][key]


def _self_declared(launcher: Launcher, pool: Pool, instance_id: str) -> str:
    """An engine registered nowhere, and an Instance exporter declaring `pool`."""
    port = port_or_free(0)
    child: Child = launcher.group.start_python(
        f"engine-{instance_id}", "deploy.demo.engine_sim", "--listen", f"127.0.0.1:{port}",
        "--model", "demo", "--max-running", "8", "--seed", "1", "--log-level", "WARNING")
    pool.engines[instance_id] = f"http://127.0.0.1:{port}"
    launcher._pending.append((f"{pool.engines[instance_id]}/health", child))
    return launcher.exporter(pool, instance_id)


def _adapter(launcher: Launcher, name: str, *args: str) -> str:
    port = port_or_free(0)
    child = launcher.group.start_python(
        name, "poolscope.exporters.proxy", *args, "--listen", f"127.0.0.1:{port}",
        "--sample-interval", "1", "--gateway-timeout", "1", "--log-level", "WARNING")
    launcher._pending.append((f"http://127.0.0.1:{port}/healthz", child))
    return f"127.0.0.1:{port}"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("membership")
    launcher = Launcher(workdir)
    llmgw = Page(LLMGW_PAGE)
    try:
        with serving(llmgw) as llmgw_url, \
                serving((GATEWAYS / "gie_epp_objective.txt").read_bytes()) as gie_url:
            solo, chat = Pool("solo", "", None), Pool("chat", "", None)  # type: ignore[arg-type]
            emb = launcher.pool("emb")
            launcher.wait()
            targets = [_self_declared(launcher, solo, "s1"), _self_declared(launcher, solo, "s2"),
                       _self_declared(launcher, chat, "c1"), launcher.instance(emb, "m1")]
            proxies = [emb.proxy_url.removeprefix("http://"),
                       _adapter(launcher, "llmgw-adapter", "--gateway", "llmgw",
                                "--gateway-metrics-url", llmgw_url, "--pool-label", "pool"),
                       _adapter(launcher, "gie-adapter", "--gateway", "gie",
                                "--gateway-metrics-url", gie_url, "--proxy-id", "emb"),
                       _adapter(launcher, "gie-pool-adapter", "--gateway", "gie",
                                "--gateway-metrics-url", gie_url, "--pool-label")]
            launcher.wait()
            jobs = [scrape_config("instances", targets), scrape_config("proxies", proxies)]
            with running_prometheus(workdir / "prometheus", jobs) as prom:
                bridge = launcher.scheduler_bridge("scheduler-bridge", [prom.url])
                launcher.wait()
                yield Stack(prom, bridge, llmgw, f"http://{proxies[1]}/metrics", solo)
    finally:
        launcher.stop()


def test_no_proxy_side_exporter_the_instance_exporters_fill_the_pool(stack: Stack) -> None:
    s = stack.settled(
        "solo", metric_source__instances="self_declared", instances__total=2,
        instances__alive=2, instances__stale=0, instances__with_resource=2,
        instances__missing_resource=0, health__data_quality="partial",
        utilization__cpu_avg=MEASURED, utilization__memory_used_ratio=MEASURED,
        health__resource_freshness_s_max=MEASURED, load__engine_running_total=MEASURED,
        # The engines stand in for the Proxy's load, under their own source name.
        load__inflight_total=0, metric_source__inflight="engine")
    assert 0 <= s["utilization"]["cpu_avg"] <= 100
    # Only the embedded Proxy's dispatch path knows idle times; none is invented.
    assert s["instances"]["idle"] is None and s["instances"]["idle_unknown"] is None
    assert s["load"]["prepare_queue_depth"] is None


def test_gateway_pools_come_from_the_gateway_page(stack: Stack) -> None:
    # llmgw's page: chat has 3 replicas, one with stale metrics (40 in flight);
    # batch has 2, one with its breaker open (22 in flight).
    stack.settled("chat", metric_source__instances="gateway:llmgw", instances__total=3,
                  instances__alive=2, instances__stale=1, instances__with_resource=1,
                  metric_source__inflight="gateway:llmgw", load__inflight_total=40,
                  utilization__cpu_avg=MEASURED)  # its own Instance exporter
    batch = stack.settled("batch", instances__total=2, instances__alive=1,
                          instances__stale=1, load__inflight_total=22,
                          instances__with_resource=0, health__data_quality="partial")
    assert batch["utilization"]["cpu_avg"] is None  # nobody measures batch's hosts
    # The router's admission bands are not one pool's: no queue is attributed.
    assert batch["load"]["prepare_queue_depth"] is None


def test_an_endpoint_picker_pool_has_no_stale_count_to_invent(stack: Stack) -> None:
    # The EPP's page: 3 endpoints listed, 3 ready pods, 25 requests running, and a
    # request counter that does not move (a measured 0 req/s once its window is covered).
    s = stack.settled(EPP_POOL, RATE_SETTLE_S, metric_source__instances="gateway:gie",
                      instances__total=3,
                      instances__alive=3, load__inflight_total=25, load__qps_1m_total=0,
                      metric_source__qps_1m="gateway:gie")
    assert s["instances"]["stale"] is None  # no per-endpoint liveness: unknown, not 0
    assert s["load"]["prepare_queue_depth"] is None
    assert s["utilization"]["cpu_avg"] is None


def test_the_embedded_registry_wins_over_a_gateway_claiming_its_pool(stack: Stack) -> None:
    # GIE's page (3 ready pods) claims `emb` too; the Proxy registers one Instance.
    stack.settled("emb", metric_source__instances="proxy_registry", instances__total=1,
                  instances__alive=1, metric_source__inflight="proxy_dispatch",
                  load__inflight_total=MEASURED)


@pytest.mark.parametrize(("status", "body"), [
    (500, b"internal error\n"),
    (200, b"this is not {the exposition format\n"),
    (200, LLMGW_PAGE.replace(b'replica="chat-0"} 14', b'replica="chat-0"} NaN')),
], ids=["http-500", "garbled", "nan"])
def test_a_failing_gateway_blanks_its_own_fields_only(stack: Stack, status: int,
                                                      body: bytes) -> None:
    stack.settled("chat", metric_source__instances="gateway:llmgw", instances__total=3,
                  load__inflight_total=40)
    stack.llmgw.status, stack.llmgw.body = status, body
    try:
        # The gateway's counts and load are unknown now; they are not replaced by the
        # one member that declares chat itself (the pool would look healthier), nor
        # by its engine. What the Instance exporter measures stays.
        stack.settled("chat", metric_source__instances="unknown", instances__total=None,
                      load__inflight_total=None, instances__with_resource=1,
                      utilization__cpu_avg=MEASURED)
        # batch has no member of its own: nothing about it is measured any more.
        eventually(lambda: stack.summary("batch"),
                   lambda b: b is None or b["instances"]["total"] is None, SHORT_BOUND_S,
                   "batch loses its gateway counts")
        failing = (b'poolscope_proxy_collector_success{collector="gateway",proxy_id="chat",'
                   b'source="exporter"} 0.0')
        eventually(lambda: fetch(stack.adapter_metrics)[2], lambda page: failing in page,
                   SHORT_BOUND_S, "the adapter says its read fails")
    finally:
        stack.llmgw.status, stack.llmgw.body = 200, LLMGW_PAGE
    stack.settled("chat", metric_source__instances="gateway:llmgw", instances__total=3,
                  load__inflight_total=40)


def test_a_killed_member_counts_as_stale_and_the_survivor_stays_measured(
        stack: Stack) -> None:
    stack.settled("solo", instances__total=2, instances__alive=2)
    stop_group(stack.solo.exporters["s2"].process)
    stack.settled("solo", metric_source__instances="self_declared", instances__total=2,
                  instances__alive=1, instances__stale=1, instances__with_resource=1,
                  utilization__cpu_avg=MEASURED, health__data_quality="partial")
