"""Faults behind the pools: Prometheus going away (alone, or one of an HA pair) and
a Proxy restarting. One pool (a demo Proxy, two Instances, steady load), two
Prometheus servers scraping it, and two Scheduler bridges: one on Prometheus A
alone, one on the pair [A, B]. A test that stops A starts it again before it ends.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from deploy.demo.processes import Child, stop_group, wait_ready
from harness.polling import eventually
from harness.prometheus import Prometheus, running_prometheus, scrape_config
from tests.reliability.stack import (
    Launcher,
    Pool,
    fetch,
    fetch_json,
    restart_process,
    scalar,
)

pytestmark = pytest.mark.integration

STALE_AFTER_S = 3.0
LOAD_RPS = 8.0
BOUND_S = 15  # a few refreshes, scrapes and evaluations


@dataclass
class Restartable:
    """Prometheus A: stopped and started again on the same port and data dir."""

    prom: Prometheus
    process: subprocess.Popen[bytes]
    spares: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        os.killpg(self.process.pid, sig)
        self.process.wait(timeout=30)

    def start_again(self) -> None:
        """Back, and its rules run again: until they do, it serves the rollups written
        before the stop, which age past --stale-after within seconds (a bridge then
        answers 503, rightly, and the next test would take that for its own fault)."""
        if self.process.poll() is None:
            return
        restarted_at = time.time()
        self.process = restart_process(self.process, self.prom.workdir / "prometheus.log")
        self.spares.append(self.process)
        wait_ready(f"{self.prom.url}/-/ready")
        self.prom.wait_for(f"max(timestamp(proxy_pool:data_quality)) > {restarted_at:.3f}",
                           timeout=BOUND_S)


@dataclass
class Stack:
    a: Restartable
    b: Prometheus
    bridge_a: str
    bridge_ab: str
    pool: Pool
    launcher: Launcher


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("backends")
    launcher = Launcher(workdir)
    try:
        pool = launcher.pool("p-ha")
        launcher.wait()
        for iid in ("h1", "h2"):
            launcher.instance(pool, iid)
        launcher.wait()
        launcher.loadgen(pool.proxy_url, LOAD_RPS)
        jobs = [scrape_config("instances", list(pool.targets.values())),
                scrape_config("proxies", [pool.proxy_url.removeprefix("http://")])]
        with running_prometheus(workdir / "a", jobs) as a, \
                running_prometheus(workdir / "b", jobs) as b:
            assert a.process is not None
            stale = ("--stale-after", f"{STALE_AFTER_S:g}", "--fresh-for", f"{STALE_AFTER_S:g}")
            restartable = Restartable(a, a.process)
            stack = Stack(restartable, b, launcher.scheduler_bridge("bridge-a", [a.url], *stale),
                          launcher.scheduler_bridge("bridge-ab", [a.url, b.url], *stale),
                          pool, launcher)
            launcher.wait()
            for prom in (a, b):
                prom.wait_for('proxy_pool:requests:rate1m{proxy_id="p-ha"} > 0', timeout=90)
            try:
                yield stack
            finally:
                for spare in restartable.spares:
                    stop_group(spare)
    finally:
        launcher.stop()


def pools(bridge: str) -> tuple[int, Any]:
    return fetch_json(f"{bridge}/debug/proxy_pool_resources")


def fresh_with_pool(result: tuple[int, Any]) -> bool:
    status, body = result
    return status == 200 and body["stale"] is False and "p-ha" in body["pools"]


def test_prometheus_restart_stale_then_503_then_recovers_in_one_refresh(stack: Stack) -> None:
    eventually(lambda: pools(stack.bridge_a), fresh_with_pool, BOUND_S, "bridge A fresh")
    seen: list[tuple[int, Any]] = []
    stale_ages: list[float] = []  # what the stale answers' headers say

    def probe_until_503() -> None:
        # Probing starts before the stop: Prometheus' own shutdown may take most of
        # the stale window on a busy machine, and the stale phase is inside it.
        deadline = time.monotonic() + STALE_AFTER_S + BOUND_S
        while time.monotonic() < deadline:
            status, headers, body = fetch(f"{stack.bridge_a}/debug/proxy_pool_resources")
            seen.append((status, json.loads(body)))
            if status == 200 and seen[-1][1]["stale"]:
                stale_ages.append(float(headers["X-Poolscope-Age-S"]))
            if status == 503:
                return
            time.sleep(0.1)

    prober = threading.Thread(target=probe_until_503)
    try:
        prober.start()
        stack.a.stop()
        prober.join()
        assert seen[-1][0] == 503, f"still {seen[-1]} past --stale-after"
        # fresh -> the last snapshot marked stale, with its age -> 503; never back.
        phase = [0 if s == 200 and not b["stale"] else 1 if s == 200 else 2 for s, b in seen]
        assert phase == sorted(phase) and 1 in phase, [(s, b.get("stale")) for s, b in seen]
        stale_bodies = [b for s, b in seen if s == 200 and b["stale"]]
        assert all("p-ha" in b["pools"] for b in stale_bodies)
        assert len(stale_ages) == len(stale_bodies) and max(stale_ages) <= STALE_AFTER_S
        error = seen[-1][1]
        assert error["backends"][0]["cause"] == "connect", error
    finally:
        prober.join()
        stack.a.start_again()
    # By itself, with no restart of the bridge: the next refresh after the one
    # failure it remembers for a TTL (by design) answers fresh again.
    eventually(lambda: pools(stack.bridge_a), fresh_with_pool, BOUND_S,
               "bridge A fresh again once Prometheus is back")


def bridge_queries(bridge: str) -> dict[tuple[str, str], float]:
    """Backend query counts and errors from the bridge's own /metrics."""
    _, _, text = fetch(f"{bridge}/metrics")
    out: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text.decode()):
        for s in family.samples:
            if s.name == "poolscope_scheduler_bridge_backend_query_duration_seconds_count":
                out[(s.labels["backend"], "queries")] = s.value
            elif s.name == "poolscope_scheduler_bridge_backend_query_errors_total":
                out[(s.labels["backend"], "errors")] = s.value
    return out


def test_ha_pair_losing_its_primary_loses_no_response(stack: Stack) -> None:
    eventually(lambda: pools(stack.bridge_ab), fresh_with_pool, BOUND_S, "bridge A+B fresh")
    answers: list[tuple[int, bool | None]] = []
    done = threading.Event()

    def client() -> None:
        while not done.is_set():
            status, body = pools(stack.bridge_ab)
            answers.append((status, body.get("stale")))
            time.sleep(0.02)

    thread = threading.Thread(target=client)
    thread.start()
    try:
        eventually(lambda: len(answers), lambda n: n > 0, BOUND_S, "answers before the kill")
        before_kill = len(answers)
        stack.a.stop(signal.SIGKILL)
        b = stack.b.url.rstrip("/")
        eventually(lambda: bridge_queries(stack.bridge_ab).get((b, "queries"), 0),
                   lambda n: n >= 3, BOUND_S, "refreshes answered by Prometheus B")
    finally:
        done.set()
        thread.join()
        stack.a.start_again()
    failed = [a for a in answers if a != (200, False)]
    assert before_kill > 0 and len(answers) - before_kill >= 3, (before_kill, len(answers))
    assert failed == [], failed
    assert bridge_queries(stack.bridge_ab)[(stack.a.prom.url.rstrip("/"), "errors")] >= 1


def test_proxy_restart_resets_counters_and_qps_stays_sane(stack: Stack) -> None:
    prom, pool = stack.b, stack.pool
    total = 'sum(poolscope_proxy_requests_total{proxy_id="p-ha"})'
    # (Polled: one slow scrape of the Proxy leaves its counter out of a read.)
    eventually(lambda: scalar(prom, total), lambda n: n is not None and n > 0, BOUND_S,
               "the Proxy's request counter before the restart")
    stop_group(pool.proxy.process)
    process = restart_process(pool.proxy.process, pool.proxy.log_path)
    pool.proxy = Child(pool.proxy.name, process, Path(pool.proxy.log_path))
    stack.launcher.group.children.append(pool.proxy)
    wait_ready(f"{pool.proxy_url}/healthz", pool.proxy)
    eventually(lambda: scalar(prom, 'sum(resets(poolscope_proxy_requests_total'
                                    '{proxy_id="p-ha"}[2m]))'),
               lambda n: n is not None and n >= 1, BOUND_S, "the counter reset is seen")
    # Let rate() work across the reset for a while, then look at every evaluation.
    # While the Proxy was down the pool had no Proxy-side QPS (and no engine
    # stand-in: the Proxy reported within MEMBER_MEMORY); the Proxy's own counter
    # is the one whose reset is under test.
    proxy_qps = 'proxy_pool:requests:rate1m{proxy_id="p-ha",source="proxy_dispatch"}'
    eventually(lambda: scalar(prom, f"count_over_time({proxy_qps}[5s])"),
               lambda n: n is not None and n >= 4, BOUND_S, "QPS evaluated after the restart")
    qps = f"{proxy_qps}[1m]"
    lowest, highest = scalar(prom, f"min_over_time({qps})"), scalar(prom, f"max_over_time({qps})")
    assert lowest is not None and highest is not None
    # A reset read as a huge negative or positive jump would break either bound.
    assert 0 <= lowest <= highest <= 3 * LOAD_RPS, (lowest, highest)
    # The bridge can serve a null QPS for a moment: the rollup is absent from an
    # evaluation in which a slow scrape left out the counters it reads.
    _, summary = eventually(
        lambda: fetch_json(f"{stack.bridge_ab}/v1/pool_resources/p-ha"),
        lambda r: r[0] == 200 and r[1]["load"]["qps_1m_total"] is not None, BOUND_S,
        "the bridge's QPS after the restart")
    assert 0 <= summary["load"]["qps_1m_total"] <= 3 * LOAD_RPS, summary["load"]
