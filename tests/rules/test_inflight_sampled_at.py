"""load.inflight_sampled_at on a real Prometheus running rules/, read through the bridge.

The promtool cases pin the rule's value where every scrape lands on the evaluation grid;
here scrapes and evaluations run on their own clocks, as in production, so the rollup
must be a scrape's own timestamp (to the millisecond), never the evaluation's: for an
embedded Proxy the newest inflight sample the evaluation saw, for the engine stand-in
the older of its two members' newest samples (each member is a scrape target of its
own, so their scrapes land at different times). The Scheduler bridge then serves that
value, unrounded, as the typed client's `load.inflight_sampled_at`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from prometheus_client import CollectorRegistry

from harness.polling import eventually
from harness.prometheus import History, recording, scrape_config
from harness.static_http import serving
from poolscope.bridge.app import Settings
from poolscope.scheduler_bridge.app import create_app
from poolscope.scheduler_bridge.client import SchedulerBridgeClient

pytestmark = pytest.mark.integration

PROXY_POOL, ENGINE_POOL = "p-proxy", "p-engine"
ROLLUP = "proxy_pool:inflight_requests:timestamp"
PROXY_INFLIGHT = "poolscope_proxy_pool_inflight_requests"
RUNNING = "poolscope_engine_requests_running"
EVALUATIONS = 8  # recorded per pool before the checks
WAIT_S = 60.0

# One page per scrape target: the embedded Proxy (its members' engines beside it do not
# count), and each of the engine pool's two members.
PAGES = {
    "proxy": (f'{PROXY_INFLIGHT}{{proxy_id="{PROXY_POOL}",source="proxy_dispatch"}} 3\n'
               f'{RUNNING}{{proxy_id="{PROXY_POOL}",instance_id="a1",source="engine:vllm"}} 3\n'
               'poolscope_engine_requests_waiting'
               f'{{proxy_id="{PROXY_POOL}",instance_id="a1",source="engine:vllm"}} 0\n'),
    **{member: (
        f'{RUNNING}{{proxy_id="{ENGINE_POOL}",instance_id="{member}",source="engine:vllm"}} 2\n'
        'poolscope_engine_requests_waiting'
        f'{{proxy_id="{ENGINE_POOL}",instance_id="{member}",source="engine:vllm"}} 1\n')
       for member in ("e1", "e2")},
}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[History]:
    workdir = tmp_path_factory.mktemp("sampled_at")
    with contextlib.ExitStack() as pages:
        urls = {name: pages.enter_context(serving(body.encode()))
                for name, body in PAGES.items()}
        jobs = [scrape_config(name, [url.removeprefix("http://").removesuffix("/metrics")])
                for name, url in urls.items()]
        with recording(workdir, jobs) as history:
            for pool in (PROXY_POOL, ENGINE_POOL):
                eventually(lambda p=pool: len(history.samples(f'{ROLLUP}{{proxy_id="{p}"}}')),
                           lambda n: n >= EVALUATIONS, WAIT_S,
                           f"{ROLLUP} of {pool} recorded {EVALUATIONS} times")
            yield history


def stamps(history: History, selector: str) -> list[float]:
    return [t for t, _ in history.samples(selector)]


def newest(scrapes: list[float], cutoff: float) -> float | None:
    seen = [t for t in scrapes if t <= cutoff]
    return seen[-1] if seen else None


def check(run: History, pool: str, members: dict[str, str]) -> None:
    """Each evaluation recorded the oldest of the members' newest scrapes it saw.

    An evaluation's cutoff is uncertain by a scrape in flight (Prometheus.cutoffs_seen_at):
    the value must match one of the cutoffs it may have had.
    """
    prom = run.prom
    scrapes = {name: stamps(run, selector) for name, selector in members.items()}
    inputs = list(members.values())
    recorded = run.samples(f'{ROLLUP}{{proxy_id="{pool}"}}')
    assert len(recorded) >= EVALUATIONS
    for evaluated, value in recorded:
        expected = set()
        for cutoff in prom.cutoffs_seen_at(evaluated, inputs):
            # A member not scraped yet is not in the sum either (the first evaluations).
            seen = [t for t in (newest(s, cutoff) for s in scrapes.values()) if t is not None]
            if seen:
                expected.add(min(seen))
        assert round(value, 3) in {round(t, 3) for t in expected}, (
            pool, evaluated, value, sorted(expected))
    # Scrapes and evaluations keep their phases: the evaluation's own time would show.
    assert any(value != evaluated for evaluated, value in recorded), pool


def test_an_embedded_proxys_inflight_is_timed_by_its_scrape(run: History) -> None:
    check(run, PROXY_POOL,
          {"proxy": f'{PROXY_INFLIGHT}{{proxy_id="{PROXY_POOL}",source="proxy_dispatch"}}'})
    [series] = run.prom.query(f'{ROLLUP}{{proxy_id="{PROXY_POOL}"}}')
    assert series["metric"]["source"] == "proxy_dispatch"


def test_the_engine_stand_in_is_timed_by_its_oldest_members_scrape(run: History) -> None:
    members = {m: f'{RUNNING}{{proxy_id="{ENGINE_POOL}",instance_id="{m}"}}' for m in ("e1", "e2")}
    check(run, ENGINE_POOL, members)
    [series] = run.prom.query(f'{ROLLUP}{{proxy_id="{ENGINE_POOL}"}}')
    assert series["metric"]["source"] == "engine"


async def test_the_bridge_serves_the_rollup_as_the_clients_inflight_sampled_at(
        run: History) -> None:
    app = create_app(Settings(backends=(run.prom.url,), cache_ttl_s=0.0, answer_within_s=30.0),
                     registry=CollectorRegistry())
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as session:
            snap = await SchedulerBridgeClient(str(server.make_url("")), session).snapshot()
    finally:
        await server.close()
    assert snap.stale is False
    for pool, source in ((PROXY_POOL, "proxy_dispatch"), (ENGINE_POOL, "engine")):
        [series] = await asyncio.to_thread(
            run.prom.query, f'{ROLLUP}{{proxy_id="{pool}"}}', snap.generated_at)
        load = snap.pools[pool].load
        assert load.inflight_sampled_at == float(series["value"][1]), pool
        assert load.inflight_total == (3 if pool == PROXY_POOL else 6)
        assert snap.pools[pool].metric_source.inflight == source
        # A scrape of the last few seconds, not a count or a rounded time.
        assert snap.generated_at - 5 < load.inflight_sampled_at <= snap.generated_at
