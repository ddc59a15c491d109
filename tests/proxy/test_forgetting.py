"""Bounded memory of the dead: the embedded Proxy forgets a member silent past its bound.

A crashed Instance never deregisters. Each test here fails when the bound is removed:
the forgotten member's series, dispatch statistics and histogram would stay, and the
pool counts would keep it for ever.
"""

from __future__ import annotations

import logging
import math
import re

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from poolscope.contract import catalog
from poolscope.contract.thresholds import FORGET_AFTER_S
from poolscope.exporters.proxy import InstanceRegistry, ProxyExporter, UnknownInstance
from poolscope.exporters.proxy.registry import DEFAULT_HEARTBEAT_TIMEOUT
from tests.proxy.conftest import PROXY_ID, FakeClock

CRASHED = 2000
LIVE = ("live-1", "live-2")
BEAT_S = 5.0  # how often the live members heartbeat, well inside the timeout
INSTANCE_ID = re.compile(r'instance_id="([^"]*)"')
# A page's samples by series (the line up to its value), as rendered.
Page = dict[str, float]


class Proxy:
    """An embedded Proxy's exporter on a fake clock, read through its /metrics page."""

    def __init__(self, clock: FakeClock, **kwargs: float) -> None:
        self.clock = clock
        self.exporter = ProxyExporter(PROXY_ID, clock=clock, **kwargs)
        self.metrics = CollectorRegistry()
        self.exporter.register_into(self.metrics)

    def page(self) -> Page:
        """A scrape of the rendered exposition, split into its samples, each named as
        rendered (labels sorted). client_python's parser would take seconds for the
        54,000 series of the crashed members."""
        lines = generate_latest(self.metrics).decode().splitlines()
        return {series: float(value) for series, _, value in
                (line.rpartition(" ") for line in lines if not line.startswith("#"))}

    def forgotten(self) -> float | None:
        return pool(self.page(), catalog.PROXY_INSTANCES_FORGOTTEN.name)

    def wait(self, seconds: float) -> None:
        """Let `seconds` pass while the live members heartbeat every BEAT_S."""
        for _ in range(math.ceil(seconds / BEAT_S)):
            self.clock.advance(BEAT_S)
            for instance_id in LIVE:
                assert self.exporter.instances.heartbeat(instance_id)


def pool(page: Page, name: str) -> float | None:
    """A pool-level registry series of the page (None: absent)."""
    return page.get(f'{name}{{proxy_id="{PROXY_ID}",source="{catalog.SOURCE_PROXY_REGISTRY}"}}')


def instance_ids(page: Page) -> set[str]:
    return {m[1] for series in page for m in INSTANCE_ID.finditer(series)}


async def dispatch(exporter: ProxyExporter, instance_id: str) -> None:
    async with exporter.dispatch.request(), exporter.dispatch.track(instance_id):
        pass


async def serve(proxy: Proxy, members: tuple[str, ...]) -> None:
    """Register the members and send each a request."""
    for instance_id in members:
        proxy.exporter.instances.register(instance_id, f"http://{instance_id}", capacity=4)
        await dispatch(proxy.exporter, instance_id)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


async def test_crashed_members_leave_the_page_and_the_counts_after_the_bound(
        clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    proxy = Proxy(clock)
    crashed = [f"crashed-{n:04d}" for n in range(CRASHED)]
    await serve(proxy, LIVE)
    for instance_id in crashed:
        proxy.exporter.instances.register(instance_id, f"http://{instance_id}", capacity=4)
        proxy.exporter.instances.report_resources(instance_id, {"cpu": 1})
        await dispatch(proxy.exporter, instance_id)
    caplog.set_level(logging.WARNING, logger="poolscope.exporters.proxy.registry")

    # Until the bound the crashed members are stale, as before.
    proxy.wait(FORGET_AFTER_S - BEAT_S)
    before = proxy.page()
    assert instance_ids(before) == {*LIVE, *crashed}
    assert pool(before, catalog.POOL_INSTANCES_REGISTERED.name) == CRASHED + len(LIVE)
    assert pool(before, catalog.POOL_INSTANCES_STALE.name) == CRASHED
    # The count is a measured 0 before the first forgetting, not absent.
    assert pool(before, catalog.PROXY_INSTANCES_FORGOTTEN.name) == 0 and not caplog.records

    proxy.wait(2 * BEAT_S)
    page = proxy.page()
    assert instance_ids(page) == set(LIVE)
    assert pool(page, catalog.POOL_INSTANCES_REGISTERED.name) == len(LIVE)
    assert pool(page, catalog.POOL_INSTANCES_ALIVE.name) == len(LIVE)
    assert pool(page, catalog.POOL_INSTANCES_STALE.name) == 0
    assert pool(page, catalog.PROXY_INSTANCES_FORGOTTEN.name) == CRASHED
    # The page is back to the series a Proxy that only ever had the live members has.
    live = Proxy(clock)
    await serve(live, LIVE)
    assert set(page) == set(live.page())
    assert len(before) > len(page) + 20 * CRASHED

    # Each forgetting is logged once, with the pool, the member and its silence.
    proxy.wait(FORGET_AFTER_S)
    proxy.page()
    assert [r.levelno for r in caplog.records] == [logging.WARNING] * CRASHED
    said = sorted(r.getMessage() for r in caplog.records)
    assert all(PROXY_ID in line and "no heartbeat for 6" in line for line in said)
    assert [line.split("Instance ")[1].split(":")[0] for line in said] == crashed
    assert proxy.forgotten() == CRASHED


async def test_a_forgotten_members_dispatch_stats_and_histogram_go_with_it(
        clock: FakeClock) -> None:
    proxy = Proxy(clock, heartbeat_timeout=3.0, forget_after=30.0)
    reg = proxy.exporter.instances
    reg.register("a", "http://a", capacity=2)
    reg.report_resources("a", {"cpu": 1})
    await dispatch(proxy.exporter, "a")
    duration = catalog.PROXY_INSTANCE_REQUEST_DURATION.name
    assert any(series.startswith(duration) for series in proxy.page())

    clock.advance(30.001)
    assert reg.dispatch_stats("a") is None
    with pytest.raises(UnknownInstance):
        proxy.exporter.dispatch.track("a")
    assert instance_ids(proxy.page()) == set()
    # Its requests stay counted where the Proxy counts every request it accepted.
    assert proxy.page()[f'{catalog.PROXY_REQUESTS.name}{{outcome="ok",proxy_id="{PROXY_ID}",'
                        f'source="{catalog.SOURCE_PROXY_DISPATCH}"}}'] == 1


async def test_a_forgotten_member_comes_back_as_new_when_it_registers_again(
        clock: FakeClock) -> None:
    proxy = Proxy(clock, heartbeat_timeout=3.0, forget_after=30.0)
    reg = proxy.exporter.instances
    old = reg.register("a", "http://a", capacity=2)
    reg.report_resources("a", {"cpu": 1})
    reg.set_admission_state("a", "asleep")
    await dispatch(proxy.exporter, "a")

    clock.advance(31.0)
    # Its heartbeat is refused, as an unknown member's: that tells it to register again.
    assert not reg.heartbeat("a")
    new = reg.register("a", "http://a2", capacity=3)
    assert new is not old and reg.is_alive(new) and reg.instances() == [new]
    assert (new.resource_snapshot, new.last_resource_report_time, new.admission_state) == (
        None, None, None)
    assert (new.dispatch.inflight, sum(new.dispatch.outcomes.values()),
            new.dispatch.duration.count, new.dispatch.last_dispatch_time) == (0, 0, 0, None)
    assert proxy.forgotten() == 1  # forgotten once; registering again is not a forgetting


def test_the_bound_counts_from_the_last_heartbeat(clock: FakeClock) -> None:
    reg = InstanceRegistry(heartbeat_timeout=3.0, clock=clock, forget_after=30.0)
    reg.register("a", "http://a")
    reg.register("b", "http://b")
    for _ in range(10):  # a beats well inside the bound for ten bounds: it stays
        clock.advance(20.0)
        assert reg.heartbeat("a")
        b = reg.get("b")
        assert b is None or not reg.is_alive(b)  # stale until forgotten
    assert [i.instance_id for i in reg.instances()] == ["a"]
    assert reg.forgotten == 1
    clock.advance(30.0)  # silent exactly the bound: stale, not yet forgotten
    assert reg.get("a") is not None and reg.alive() == []
    clock.advance(0.001)
    assert reg.instances() == [] and reg.forgotten == 2


def test_a_deregistered_member_is_not_counted_as_forgotten(clock: FakeClock) -> None:
    reg = InstanceRegistry(heartbeat_timeout=3.0, clock=clock, forget_after=30.0)
    reg.register("a", "http://a")
    assert reg.deregister("a")
    clock.advance(60.0)
    assert reg.instances() == [] and reg.forgotten == 0


@pytest.mark.parametrize("forget_after", [3.0, 2.0, 0.0, -1.0, math.nan, math.inf])
def test_forget_after_must_be_finite_and_longer_than_the_heartbeat_timeout(
        forget_after: float) -> None:
    with pytest.raises(ValueError, match="forget_after"):
        ProxyExporter(PROXY_ID, heartbeat_timeout=3.0, forget_after=forget_after)


def test_the_default_bound_is_longer_than_the_default_heartbeat_timeout() -> None:
    assert FORGET_AFTER_S > DEFAULT_HEARTBEAT_TIMEOUT
    assert ProxyExporter(PROXY_ID).instances.forget_after == FORGET_AFTER_S
