"""The Proxy exporter library on its own: registry, dispatch, queues, collector."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from poolscope.contract import catalog
from poolscope.contract.thresholds import IDLE_S
from poolscope.exporters.proxy import ProxyExporter, UnknownInstance
from poolscope.exporters.proxy.histogram import Histogram
from poolscope.scheduler_bridge.client import parse_pool
from tests.proxy.conftest import PROXY_ID, FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def exporter(clock: FakeClock) -> ProxyExporter:
    return ProxyExporter(PROXY_ID, heartbeat_timeout=3.0, clock=clock)


@pytest.fixture
def metrics(exporter: ProxyExporter) -> CollectorRegistry:
    registry = CollectorRegistry()
    exporter.register_into(registry)
    return registry


def value(metrics: CollectorRegistry, name: str, **labels: str) -> float | None:
    return metrics.get_sample_value(name, {"proxy_id": PROXY_ID, **labels})


def published(metrics: CollectorRegistry) -> dict[str, tuple[str, ...]]:
    """Family name -> the label names of its first sample (le excluded)."""
    out: dict[str, tuple[str, ...]] = {}
    for family in metrics.collect():
        name = family.name + ("_total" if family.type == "counter" else "")
        if family.samples:
            out[name] = tuple(sorted(set(family.samples[0].labels) - {"le"}))
    return out


# --- registry -----------------------------------------------------------------

def test_alive_follows_the_heartbeat_timeout(exporter: ProxyExporter, clock: FakeClock) -> None:
    reg = exporter.instances
    inst = reg.register("a", "http://a")
    clock.advance(3.0)
    assert reg.is_alive(inst)
    clock.advance(0.001)
    assert not reg.is_alive(inst)
    assert reg.alive() == []
    assert reg.heartbeat("a")
    assert reg.alive() == [inst]
    assert not reg.heartbeat("nobody")


def test_registering_again_updates_but_keeps_history(exporter: ProxyExporter) -> None:
    reg = exporter.instances
    first = reg.register("a", "http://old", capacity=2)
    first.dispatch.outcomes["ok"] += 3
    again = reg.register("a", "http://new", capacity=None)
    assert again is first
    assert (again.url, again.capacity, again.dispatch.outcomes["ok"]) == ("http://new", None, 3)


@pytest.mark.parametrize(("instance_id", "capacity"), [("", None), ("a", 0), ("a", -1)])
def test_registry_refuses_bad_registrations(exporter: ProxyExporter, instance_id: str,
                                            capacity: int | None) -> None:
    with pytest.raises(ValueError):
        exporter.instances.register(instance_id, "http://a", capacity)
    assert exporter.instances.instances() == []


def test_heartbeat_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError):
        ProxyExporter(PROXY_ID, heartbeat_timeout=0)


# --- dispatch -----------------------------------------------------------------

async def test_track_counts_inflight_while_entered(exporter: ProxyExporter,
                                                   clock: FakeClock) -> None:
    stats = exporter.instances.register("a", "http://a").dispatch
    async with exporter.dispatch.track("a"):
        async with exporter.dispatch.track("a"):
            assert stats.inflight == 2
        clock.advance(2.0)
        assert stats.inflight == 1
    assert stats.inflight == 0
    assert stats.outcomes == {"ok": 2}
    assert (stats.duration.count, stats.duration.sum) == (2, 2.0)


async def test_every_way_out_leaves_inflight_exact(exporter: ProxyExporter) -> None:
    stats = exporter.instances.register("a", "http://a").dispatch

    async def hang() -> None:
        async with exporter.dispatch.track("a"):
            await asyncio.Event().wait()

    with pytest.raises(RuntimeError):
        async with exporter.dispatch.track("a"):
            raise RuntimeError("engine broke")
    with pytest.raises(TimeoutError):
        async with exporter.dispatch.track("a"), asyncio.timeout(0):
            await asyncio.sleep(1)  # the work the deadline cuts short: never waited out
    task = asyncio.create_task(hang())
    await asyncio.sleep(0)  # one turn of the loop: the new task runs to its first await
    assert stats.inflight == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with exporter.dispatch.track("a") as d:
        d.outcome = "rejected"

    assert stats.inflight == 0
    assert stats.outcomes == {"error": 1, "timeout": 1, "cancelled": 1, "rejected": 1}


async def test_cancellation_wins_over_an_outcome_set_earlier(exporter: ProxyExporter) -> None:
    async def run() -> None:
        async with exporter.dispatch.request() as r:
            r.outcome = "ok"
            await asyncio.Event().wait()

    task = asyncio.create_task(run())
    await asyncio.sleep(0)  # one turn of the loop: the task is inside its request
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert exporter.dispatch.requests == {"cancelled": 1}


async def test_an_unknown_outcome_is_refused(exporter: ProxyExporter) -> None:
    async with exporter.dispatch.request() as r:
        with pytest.raises(ValueError):
            r.outcome = "fine"  # type: ignore[assignment]
    assert exporter.dispatch.requests == {"ok": 1}


def test_dispatch_to_an_unregistered_instance_is_refused(exporter: ProxyExporter) -> None:
    with pytest.raises(UnknownInstance):
        exporter.dispatch.track("ghost")


async def test_deregistering_mid_dispatch_resurrects_nothing(
        exporter: ProxyExporter, metrics: CollectorRegistry) -> None:
    exporter.instances.register("a", "http://a")
    async with exporter.dispatch.track("a"):
        assert exporter.instances.deregister("a")
    assert exporter.instances.get("a") is None
    assert not any(s.labels.get("instance_id") for f in metrics.collect() for s in f.samples)


# --- queues -------------------------------------------------------------------

def test_queue_accounting(exporter: ProxyExporter, metrics: CollectorRegistry,
                          clock: FakeClock) -> None:
    waiting: list[object] = []
    q = exporter.add_queue("prepare", depth=lambda: len(waiting), capacity=8)
    labels = {"source": "proxy_queue", "queue": "prepare"}
    assert value(metrics, "poolscope_proxy_queue_oldest_age_seconds", **labels) is None
    first = q.enter()
    waiting.append(first)
    clock.advance(1.5)
    second = q.enter()
    waiting.append(second)
    clock.advance(0.5)
    assert value(metrics, "poolscope_proxy_queue_depth", **labels) == 2
    assert value(metrics, "poolscope_proxy_queue_oldest_age_seconds", **labels) == 2.0
    assert q.leave(first) == 2.0
    assert value(metrics, "poolscope_proxy_queue_oldest_age_seconds", **labels) == 0.5
    q.reject("timeout")
    q.reject("full")
    q.reject("full")
    assert value(metrics, "poolscope_proxy_queue_rejections_total", reason="full",
                 **labels) == 2
    assert value(metrics, "poolscope_proxy_queue_wait_seconds_bucket", le="2.5",
                 **labels) == 1
    assert value(metrics, "poolscope_proxy_queue_wait_seconds_bucket", le="1.0",
                 **labels) == 0
    assert value(metrics, "poolscope_proxy_queue_capacity", source="configured",
                 queue="prepare") == 8
    with pytest.raises(ValueError):
        q.leave(first)


def test_unbounded_queue_has_no_capacity_series(exporter: ProxyExporter,
                                                metrics: CollectorRegistry) -> None:
    exporter.add_queue("ready", depth=lambda: 0)
    assert value(metrics, "poolscope_proxy_queue_depth", source="proxy_queue",
                 queue="ready") == 0
    assert value(metrics, "poolscope_proxy_queue_capacity", source="configured",
                 queue="ready") is None


def test_queue_names_and_reasons_come_from_the_catalog(exporter: ProxyExporter) -> None:
    with pytest.raises(ValueError):
        exporter.add_queue("retrieval", depth=lambda: 0)
    q = exporter.add_queue("ready", depth=lambda: 0)
    with pytest.raises(ValueError):
        exporter.add_queue("ready", depth=lambda: 0)
    with pytest.raises(ValueError):
        q.reject("bored")  # type: ignore[arg-type]


def test_histogram_buckets_are_cumulative_and_inclusive() -> None:
    h = Histogram((1.0, 2.0))
    for v in (0.5, 1.0, 1.5, 9.0):
        h.observe(v)
    family = catalog.PROXY_QUEUE_WAIT.new()
    h.add_to(family, (PROXY_ID, "proxy_queue", "ready"))
    buckets = [(s.labels["le"], s.value) for s in family.samples if s.name.endswith("_bucket")]
    assert buckets == [("1.0", 2), ("2.0", 3), ("+Inf", 4)]
    with pytest.raises(ValueError):
        h.observe(-1)


# --- collector ----------------------------------------------------------------

async def test_publishes_exactly_the_catalog_proxy_families_with_their_labels(
        exporter: ProxyExporter, metrics: CollectorRegistry) -> None:
    exporter.instances.register("a", "http://a", capacity=4)
    exporter.instances.report_resources("a", {"cpu": 1})
    for name in catalog.QUEUES:
        exporter.add_queue(name, depth=lambda: 0, capacity=2).enter()
    async with exporter.dispatch.request(), exporter.dispatch.track("a"):
        pass
    # The background-read health families belong to the gateway adapter mode.
    gateway_only = {catalog.PROXY_COLLECTOR_SAMPLE_AGE.name, catalog.PROXY_COLLECTOR_ERRORS.name,
                    catalog.PROXY_GATEWAY_SERIES_SKIPPED.name}
    expected = {f.name: tuple(sorted(f.labels)) for f in catalog.all_families()
                if f.name.startswith("poolscope_proxy_") and f.name not in gateway_only}
    assert published(metrics) == expected


def test_sources_name_the_module_that_measured(exporter: ProxyExporter,
                                              metrics: CollectorRegistry) -> None:
    exporter.instances.register("a", "http://a", capacity=4)
    exporter.add_queue("ready", depth=lambda: 0, capacity=2)
    sources = {(f.name, s.labels["source"]) for f in metrics.collect() for s in f.samples}
    assert ("poolscope_proxy_instance_alive", "proxy_registry") in sources
    assert ("poolscope_proxy_instance_capacity_requests", "configured") in sources
    assert ("poolscope_proxy_instance_inflight_requests", "proxy_dispatch") in sources
    assert ("poolscope_proxy_requests", "proxy_dispatch") in sources
    assert ("poolscope_proxy_queue_depth", "proxy_queue") in sources
    assert ("poolscope_proxy_queue_capacity", "configured") in sources
    assert len({name for name, _ in sources}) == len(sources)  # one source per family


def test_a_failing_read_blanks_state_and_reports_it(
        exporter: ProxyExporter, metrics: CollectorRegistry) -> None:
    exporter.instances.register("a", "http://a")
    depths = iter([1, "many"])
    exporter.add_queue("ready", depth=lambda: next(depths))
    health = {"source": "exporter", "collector": "proxy"}
    assert value(metrics, "poolscope_proxy_collector_success", **health) == 1
    assert value(metrics, "poolscope_proxy_collector_success", **health) == 0
    assert value(metrics, "poolscope_proxy_collector_duration_seconds", **health) is not None
    assert value(metrics, "poolscope_proxy_instance_registered", instance_id="a",
                 source="proxy_registry") is None


# --- the pool's own series ------------------------------------------------------

POOL_COUNTS = {
    "registered": catalog.POOL_INSTANCES_REGISTERED.name,
    "alive": catalog.POOL_INSTANCES_ALIVE.name,
    "stale": catalog.POOL_INSTANCES_STALE.name,
    "idle": catalog.POOL_INSTANCES_IDLE.name,
    "idle_unknown": catalog.POOL_INSTANCES_IDLE_UNKNOWN.name,
}


def pool_counts(metrics: CollectorRegistry) -> dict[str, float | None]:
    sources = {"idle": "proxy_dispatch", "idle_unknown": "proxy_dispatch"}
    return {key: value(metrics, name, source=sources.get(key, "proxy_registry"))
            for key, name in POOL_COUNTS.items()}


def test_an_empty_registry_counts_measured_zeros(metrics: CollectorRegistry) -> None:
    assert pool_counts(metrics) == dict.fromkeys(POOL_COUNTS, 0.0)
    assert value(metrics, catalog.POOL_INFLIGHT.name, source="proxy_dispatch") == 0.0
    # Nothing configured is not a capacity of 0: the series is absent.
    assert catalog.POOL_CAPACITY.name not in published(metrics)


async def test_pool_counts_agree_with_the_per_instance_series(
        exporter: ProxyExporter, metrics: CollectorRegistry, clock: FakeClock) -> None:
    reg = exporter.instances
    reg.register("busy", "http://busy", capacity=8)
    reg.register("idle", "http://idle", capacity=4)
    reg.register("never", "http://never", capacity=2)
    reg.register("late", "http://late", capacity=16)
    async with exporter.dispatch.track("idle"):
        pass
    clock.advance(IDLE_S + 1)  # past the idle threshold, and every heartbeat late
    for instance_id in ("busy", "idle", "never"):
        reg.heartbeat(instance_id)
    async with exporter.dispatch.track("busy"):
        assert pool_counts(metrics) == {"registered": 4.0, "alive": 3.0, "stale": 1.0,
                                        "idle": 1.0, "idle_unknown": 2.0}
        assert value(metrics, catalog.POOL_INFLIGHT.name, source="proxy_dispatch") == 1.0
        # Configured capacity of the alive Instances only: a late one offers nothing.
        assert value(metrics, catalog.POOL_CAPACITY.name, source="configured") == 14.0
        per_instance = sum(
            value(metrics, catalog.PROXY_INSTANCE_INFLIGHT.name, instance_id=i,
                  source="proxy_dispatch") or 0.0 for i in ("busy", "idle", "never", "late"))
        assert per_instance == 1.0



def test_an_alive_instance_without_a_configured_capacity_leaves_the_pool_s_absent(
        exporter: ProxyExporter, metrics: CollectorRegistry, clock: FakeClock) -> None:
    """Its capacity is unknown at the Proxy, not 0: the Instance exporters' stand in."""
    exporter.instances.register("configured", "http://c", capacity=8)
    exporter.instances.register("unconfigured", "http://u")
    assert catalog.POOL_CAPACITY.name not in published(metrics)
    clock.advance(10.0)  # both heartbeats late: nothing alive offers anything
    assert value(metrics, catalog.POOL_CAPACITY.name, source="configured") == 0.0


# --- the load report (the Proxy's heartbeats) ----------------------------------

async def test_the_load_report_holds_what_the_page_publishes_read_at_its_time(
        exporter: ProxyExporter, metrics: CollectorRegistry, clock: FakeClock) -> None:
    """The same inflight, capacity and queue depths as the scrape, in the summary's shape,
    so the typed client parses it as a pool summary with only those load fields."""
    reg = exporter.instances
    reg.register("a", "http://a", capacity=4)
    reg.register("b", "http://b", capacity=2)
    waiting = [object()] * 3
    exporter.add_queue("prepare", lambda: 0, capacity=64)
    exporter.add_queue("ready", lambda: len(waiting), capacity=64)
    clock.advance(1.5)
    async with exporter.dispatch.track("a"), exporter.dispatch.track("b"):
        report = exporter.load_report()
        assert report["load"]["inflight_total"] == value(
            metrics, catalog.POOL_INFLIGHT.name, source="proxy_dispatch") == 2.0
    assert report == {"schema_version": 1, "proxy_id": PROXY_ID,
                      "generated_at": clock.now_wall,
                      "load": {"inflight_total": 2.0, "capacity": 6.0,
                               "prepare_queue_depth": 0.0, "ready_queue_depth": 3.0,
                               "inflight_sampled_at": clock.now_wall},
                      "health": {"pool_admission_state": None}}
    summary = parse_pool(report)
    assert (summary.load.inflight_total, summary.load.ready_queue_depth) == (2.0, 3.0)
    assert summary.load.load_ratio is None  # not on this path: unknown, never 0


def test_the_load_report_nulls_what_the_proxy_does_not_know(
        exporter: ProxyExporter, clock: FakeClock) -> None:
    """No configured capacity, no queues, no stated admission: null, never 0."""
    exporter.instances.register("a", "http://a")
    report = exporter.load_report()
    assert report["load"] == {"inflight_total": 0.0, "capacity": None,
                              "prepare_queue_depth": None, "ready_queue_depth": None,
                              "inflight_sampled_at": clock.now_wall}
    assert report["health"] == {"pool_admission_state": None}


def test_the_load_report_is_of_the_summarys_schema_version() -> None:
    """The exporters do not import the bridges; the version is kept equal here."""
    from poolscope.bridge.summary import SCHEMA_VERSION
    from poolscope.exporters.proxy.report import REPORT_SCHEMA_VERSION
    assert REPORT_SCHEMA_VERSION == SCHEMA_VERSION


# --- admission states: asleep members offer no capacity in the report ----------

def _pool(exporter: ProxyExporter, **states: str | None) -> None:
    """Members a (capacity 4) and b (capacity 2), each stating its given state."""
    for instance_id, capacity in (("a", 4), ("b", 2)):
        exporter.instances.register(instance_id, f"http://{instance_id}", capacity)
        assert exporter.instances.set_admission_state(instance_id, states.get(instance_id))


def test_an_asleep_member_leaves_the_reports_capacity_but_not_the_pages(
        exporter: ProxyExporter, metrics: CollectorRegistry) -> None:
    """The rules subtract asleep members from the page's series themselves
    (rules/proxy_pool.yml), so only the report leaves them out."""
    _pool(exporter, a="accepting", b="asleep")
    report = exporter.load_report()
    assert report["load"]["capacity"] == 4.0
    assert report["health"]["pool_admission_state"] == "accepting"
    assert value(metrics, catalog.POOL_CAPACITY.name, source="configured") == 6.0


def test_a_pool_all_asleep_reports_a_measured_zero_capacity(exporter: ProxyExporter) -> None:
    _pool(exporter, a="asleep", b="asleep")
    report = exporter.load_report()
    assert (report["load"]["capacity"], report["health"]["pool_admission_state"]) == (
        0.0, "asleep")


@pytest.mark.parametrize("state", [None, "unknown", "draining", "saturated"])
def test_a_member_not_asleep_keeps_its_capacity(exporter: ProxyExporter,
                                                state: str | None) -> None:
    """Stating no state, or any but asleep, leaves the capacity as the page's."""
    _pool(exporter, a=state, b=state)
    report = exporter.load_report()
    assert (report["load"]["capacity"], report["health"]["pool_admission_state"]) == (
        6.0, state)


@pytest.mark.parametrize(("a", "b", "best"), [
    ("degraded", "asleep", "degraded"), ("draining", "asleep", "asleep"),
    ("asleep", None, None), ("accepting", None, None)])
def test_the_reports_admission_state_is_the_best_once_every_member_states_one(
        exporter: ProxyExporter, a: str | None, b: str | None, best: str | None) -> None:
    """A member that states none may offer better than the others: unknown, not asleep."""
    _pool(exporter, a=a, b=b)
    assert exporter.load_report()["health"]["pool_admission_state"] == best


def test_a_dead_member_counts_for_neither_capacity_nor_state(
        exporter: ProxyExporter, clock: FakeClock) -> None:
    _pool(exporter, a="asleep", b="degraded")
    clock.advance(3.5)  # both late
    exporter.instances.heartbeat("a")
    report = exporter.load_report()
    assert (report["load"]["capacity"], report["health"]["pool_admission_state"]) == (
        0.0, "asleep")


def test_the_registry_refuses_a_state_outside_the_catalog(exporter: ProxyExporter) -> None:
    exporter.instances.register("a", "http://a")
    assert exporter.instances.set_admission_state("a", "asleep")
    with pytest.raises(ValueError, match="admission_state must be one of accepting"):
        exporter.instances.set_admission_state("a", "sleepy")
    assert exporter.instances.get("a").admission_state == "asleep"  # type: ignore[union-attr]
    assert not exporter.instances.set_admission_state("nobody", "asleep")
