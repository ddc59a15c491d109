"""A sleeping engine is not free capacity, end to end: simulated vLLM engines put to
sleep through vLLM's own endpoint (`POST /sleep`), their Instance exporters, an
embedded Proxy that still holds them alive (their heartbeats go on), a real
Prometheus with rules/ and the real Scheduler bridge.

An asleep vLLM answers /metrics with 0 running, 0 waiting and an empty KV cache:
read alone, an idle, accepting Instance with its capacity free. Here it must show as
admission `asleep`, count in `instances.asleep`, and its configured capacity must
leave the pool's, until it is woken.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from harness.polling import eventually
from harness.prometheus import running_prometheus, scrape_config
from tests.reliability.stack import Launcher, Pool, fetch_json

pytestmark = pytest.mark.integration

POOL = "nap"
CAPACITY = 8  # each engine registers with the Proxy for 8 (tests/reliability/stack.py)
# A few scrapes, heartbeats and rule evaluations (1 s each) and the bridge's cache.
SETTLE_S = 60


@dataclass
class Stack:
    pool: Pool
    bridge: str

    def detail(self) -> dict[str, Any] | None:
        status, body = fetch_json(f"{self.bridge}/debug/pool_detail/{POOL}")
        return body if status == 200 else None

    def settled(self, **expect: Any) -> dict[str, Any]:
        """The pool's drill-down once its summary holds every `section__key=value`
        (one snapshot: the fields cannot come from two evaluations)."""
        def ok(d: dict[str, Any] | None) -> bool:
            return d is not None and d["local"] is not None and all(
                d["summary"][section][key] == value
                for section, key, value in ((*p.split("__"), v) for p, v in expect.items()))
        detail = eventually(self.detail, ok, SETTLE_S, f"{POOL}: {expect}")
        assert detail is not None
        return detail

    def engine(self, instance_id: str, path: str) -> None:
        request = urllib.request.Request(f"{self.pool.engines[instance_id]}{path}", b"",
                                         method="POST")
        with urllib.request.urlopen(request, timeout=5) as answer:
            assert answer.status == 200


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("sleeping")
    launcher = Launcher(workdir)
    try:
        pool = launcher.pool(POOL)
        launcher.wait()
        targets = [launcher.instance(pool, "n1"), launcher.instance(pool, "n2")]
        launcher.wait()
        jobs = [scrape_config("instances", targets),
                scrape_config("proxies", [pool.proxy_url.removeprefix("http://")])]
        with running_prometheus(workdir / "prometheus", jobs) as prom:
            bridge = launcher.scheduler_bridge("scheduler-bridge", [prom.url])
            launcher.wait()
            yield Stack(pool, bridge)
    finally:
        launcher.stop()


def _admission(detail: dict[str, Any]) -> dict[str, str | None]:
    return {i["instance_id"]: i["admission_state"] for i in detail["local"]["instances"]}


def test_an_asleep_instance_is_neither_accepting_nor_capacity(stack: Stack) -> None:
    stack.settled(instances__total=2, instances__alive=2, instances__asleep=0,
                  load__capacity=2 * CAPACITY, health__pool_admission_state="accepting")
    stack.engine("n2", "/sleep?level=1")
    try:
        # n2 still heartbeats (alive at the Proxy) and reads 0 running: only its
        # sleep state tells it apart from an idle, accepting Instance.
        detail = stack.settled(instances__alive=2, instances__asleep=1,
                               load__capacity=CAPACITY,
                               health__pool_admission_state="accepting")
        assert _admission(detail) == {"n1": "accepting", "n2": "asleep"}
        capacity = {i["instance_id"]: i["capacity"]["value"]
                    for i in detail["local"]["instances"]}
        assert capacity == {"n1": CAPACITY, "n2": None}

        stack.engine("n1", "/sleep?level=2")
        # Nobody awake: the pool admits nothing now, but can be woken (not draining).
        stack.settled(instances__alive=2, instances__asleep=2, load__capacity=0,
                      health__pool_admission_state="asleep")
    finally:
        stack.engine("n1", "/wake_up")
        stack.engine("n2", "/wake_up")
    stack.settled(instances__asleep=0, load__capacity=2 * CAPACITY,
                  health__pool_admission_state="accepting")
