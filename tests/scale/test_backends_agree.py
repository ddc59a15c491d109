"""One demo cluster's exporters, three ways to roll them up (a single Prometheus, a
federated region/global pair, VictoriaMetrics with vmalert), one Scheduler bridge on
each: the Scheduler must be told the same thing by all three, and a dead region must
vanish from the global view rather than linger at its last values."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy.demo.cluster import Cluster
from deploy.demo.processes import stop_group
from harness.cluster import demo_cluster
from harness.polling import eventually
from harness.prometheus import Prometheus
from harness.stacks import (
    FEDERATION,
    LOOKBACK_INTERVALS,
    Federation,
    external_labels_of,
    federation,
    scheduler_bridge,
    victoria_metrics,
)
from poolscope.bridge.queries import FLEET_SERIES

pytestmark = pytest.mark.integration

INTERVAL = 1.0  # scrape and evaluation everywhere; deploy/ uses 5 s
BACKENDS = ("single", "federated", "victoria")
POOLS = {"pool-1", "pool-2"}
# The load generator started with the cluster; qps_1m compares only once rate()'s
# 1 m window holds nothing but steady load on every backend.
RATE_WINDOW_S = 60.0




def pools(bridge: str) -> dict[str, dict[str, Any]]:
    with urllib.request.urlopen(f"{bridge}/debug/proxy_pool_resources", timeout=10) as r:
        body: dict[str, Any] = json.load(r)
    return body["pools"]


@dataclass
class Stacks:
    cluster: Cluster
    federation: Federation
    bridges: dict[str, str]  # backend -> its Scheduler bridge
    evaluators: dict[str, list[str]]  # backend -> what runs its rules (Prometheus, vmalert)
    started: float


def settled(summaries: dict[str, dict[str, Any]]) -> bool:
    """Both pools, every rollup the demo can measure present (VictoriaMetrics makes
    each layer of recording rules searchable ~10 s after the one it reads)."""
    return set(summaries) == POOLS and all(
        s["load"]["qps_1m_total"] is not None and s["load"]["capacity"] is not None
        and s["health"]["pool_admission_state"] is not None
        and s["instances"]["idle_unknown"] is not None for s in summaries.values())


@pytest.fixture(scope="module")
def stacks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stacks]:
    work = tmp_path_factory.mktemp("scale")
    with ExitStack() as stack:
        cluster = stack.enter_context(demo_cluster(work / "demo", proxies=2, instances=2,
                                                   rate=3.0, scrape_interval=INTERVAL))
        started = time.monotonic()
        fed = stack.enter_context(federation(
            work / "federation", {"region-a": cluster.pools[:1], "region-b": cluster.pools[1:]},
            INTERVAL))
        vm = stack.enter_context(victoria_metrics(work / "victoria", cluster.pools, INTERVAL))
        # --cache-ttl 0: every request reads its backend, so the three are compared at
        # the moment they are asked, not at three different cache fills.
        bridges = {name: stack.enter_context(scheduler_bridge(
            work / f"bridge-{name}", url, name, "--cache-ttl", "0"))
            for name, url in (("single", cluster.prometheus_url),
                              ("federated", fed.global_url), ("victoria", vm.url))}
        for name, bridge in bridges.items():
            eventually(lambda b=bridge: pools(b), settled, 120, f"{name} bridge settles")
        evaluators = {"single": [cluster.prometheus_url],
                      "federated": list(fed.region_urls.values()), "victoria": [vm.vmalert_url]}
        yield Stacks(cluster, fed, bridges, evaluators, started)


def running_labels(url: str, workdir: Path) -> dict[str, str]:
    """The external labels a region Prometheus runs with: what it attaches to what it
    federates, whatever file the stack rendered for it."""
    config = Prometheus(url, workdir)._get("/api/v1/status/config", {})["yaml"]
    return external_labels_of(yaml.safe_load(config))


def test_global_prometheus_holds_only_place_labelled_pool_rollups(stacks: Stacks) -> None:
    glob = Prometheus(stacks.federation.global_url, stacks.cluster.workdir)
    # Everything the federation job stored, less what Prometheus records about the scrape.
    names = {s["metric"]["__name__"] for s in glob.query(
        '{job="poolscope-federate",__name__!~"up|scrape_.+"}')}
    assert names and all(n.startswith("proxy_pool:") or n == FLEET_SERIES for n in names), names
    # Each region runs with every label the deployed region file sets, region and
    # cluster its own: the dashboards' Region and Cluster variables filter on them.
    deployed = set(external_labels_of(yaml.safe_load(
        (FEDERATION / "region-prometheus.yml").read_text())))
    places = {region: running_labels(url, stacks.cluster.workdir)
              for region, url in stacks.federation.region_urls.items()}
    assert all(set(labels) == deployed and labels["region"] == region
               for region, labels in places.items()), places
    assert len({labels["cluster"] for labels in places.values()}) == len(places), places
    # Polled: a federated sample is up to an evaluation plus a federation scrape old,
    # against a global lookback of a few intervals; one late scrape hides a region.
    home = {"pool-1": "region-a", "pool-2": "region-b"}
    eventually(lambda: {(s["metric"]["proxy_id"], s["metric"]["region"],
                         s["metric"].get("cluster"))
                        for s in glob.query('{__name__=~"proxy_pool:.+"}')},
               lambda r: r == {(pool, region, places[region]["cluster"])
                               for pool, region in home.items()}, 15,
               "each pool's rollups under its own region and cluster")
    # ... and each region's series that says when its rules ran (the bridge's probe).
    eventually(lambda: {s["metric"]["region"] for s in glob.query(FLEET_SERIES)},
               lambda r: r == set(places), 15, "each region's fleet series")
    # The global one runs no rules: every rollup it holds came from a region.
    assert glob._get("/api/v1/rules", {})["groups"] == []


def rule_states(evaluator: str, names: set[str]) -> list[dict[str, Any]]:
    """What an evaluator (Prometheus or vmalert, the same API) last did with the rules
    named: for a failure message, so that a rollup gone absent says whether its rule
    failed (and why) or returned nothing."""
    try:
        with urllib.request.urlopen(f"{evaluator}/api/v1/rules", timeout=10) as r:
            groups = json.load(r)["data"]["groups"]
    except OSError as e:
        return [{"unreadable": str(e)}]
    return [{k: rule.get(k) for k in ("name", "health", "lastError", "lastSamples",
                                        "lastEvaluation")}
            for group in groups for rule in group["rules"] if rule.get("name") in names]


def keys(tree: Any, prefix: str = "") -> set[str]:
    if not isinstance(tree, dict):
        return {prefix}
    return {k for key, sub in tree.items() for k in keys(sub, f"{prefix}.{key}")}


def test_every_backend_serves_the_same_summary(stacks: Stacks) -> None:
    # Stop the load, so that the fast gauges (inflight, queues, engine batch) settle
    # to a measured 0 that every backend must agree on exactly; what the load did
    # stays measurable in qps_1m, which decays over its 1 m window.
    # A wait for time itself, on purpose: no state says a 1 m window is full of load.
    time.sleep(max(0.0, RATE_WINDOW_S - (time.monotonic() - stacks.started)))
    loadgen = next(c for c in stacks.cluster.group.children if c.name == "loadgen")
    stop_group(loadgen.process)

    def snapshot() -> dict[str, dict[str, dict[str, Any]]]:
        return {name: pools(bridge) for name, bridge in stacks.bridges.items()}

    # Every gauge the load moved, including those a rule chain makes a vmalert
    # evaluation later than the inflight they derive from (load_ratio).
    settled = ("inflight_total", "engine_running_total", "engine_waiting_total", "load_ratio")

    def drained(views: dict[str, dict[str, dict[str, Any]]]) -> bool:
        return all(set(v) == POOLS and all(
            s["load"][key] == 0 for s in v.values() for key in settled)
            for v in views.values())

    def fresh(view: dict[str, dict[str, Any]]) -> bool:
        return set(view) == POOLS and all(
            s["health"]["resource_freshness_s_max"] is not None for s in view.values())

    views = eventually(snapshot, drained, 90, "the load's gauges drain to 0 on every backend")
    # Freshness is compared at a moment of its own for each backend: on a loaded box one
    # scrape that timed out leaves it unknown (null) for a few evaluations, and with every
    # core busy VictoriaMetrics (3 intervals of staleness) is rarely fresh at the same
    # moment as the two others (seen: 90 s without such a moment).
    freshness = {}
    for name, bridge in stacks.bridges.items():
        try:
            freshness[name] = eventually(lambda b=bridge: pools(b), fresh, 90,
                                         f"{name}: every pool's resource data fresh")
        except AssertionError as e:
            rules = {"proxy_pool:resource_freshness_seconds:max", "proxy_pool:instances:count"}
            states = [rule_states(url, rules) for url in stacks.evaluators[name]]
            raise AssertionError(f"{e}\n{name}'s rules: {states}") from None
    single = views["single"]
    for name in BACKENDS[1:]:
        other = views[name]
        for pool in POOLS:
            a, b = single[pool], other[pool]
            where = f"{name} {pool}"
            assert keys(b) == keys(a), where
            # Counts, capacity, states, provenance: exactly the same.
            for section in ("instances", "metric_source", "metric_quality"):
                assert b[section] == a[section], f"{where} {section}"
            for key in ("capacity", "inflight_total", "engine_running_total",
                        "engine_waiting_total", "prepare_queue_depth", "ready_queue_depth",
                        "queue_pressure", "load_ratio"):
                assert b["load"][key] == a["load"][key], f"{where} load.{key}"
            for key in ("pool_admission_state", "data_quality"):
                assert b["health"][key] == a["health"][key], f"{where} health.{key}"
            # No GPU on this machine: null on every backend, never a 0.
            assert [b["utilization"][k] for k in ("gpu_util_avg", "gpu_util_max",
                                                  "gpu_mem_used_ratio")] == [None] * 3
            # qps_1m: the backends' 1 m windows end up to two intervals apart (the
            # federation hop, VictoriaMetrics' latencyOffset), about 2 x 3-6 req/s
            # over 60 s = 0.2 req/s; and Prometheus extrapolates rate() to the window
            # edges while VictoriaMetrics does not. 20% of 3-6 req/s covers both,
            # and a lost or doubled series (>= 50% off) still fails.
            assert b["load"]["qps_1m_total"] > 0, where
            assert b["load"]["qps_1m_total"] == pytest.approx(
                a["load"]["qps_1m_total"], rel=0.2), where
            # Host memory of one machine, scraped by each backend at its own moment, while
            # the other test workers start and stop servers: within a tenth of the
            # machine's memory (a wrong series, such as a fake 0, is further off).
            assert b["utilization"]["memory_used_ratio"] == pytest.approx(
                a["utilization"]["memory_used_ratio"], abs=0.1), where
            # psutil CPU over a 1 s sample on a shared box swings by tens of percent
            # between consecutive scrapes, and each backend scrapes on its own:
            # present and in range is the honest comparison.
            for key in ("cpu_avg", "cpu_max"):
                assert 0 <= b["utilization"][key] <= 100, f"{where} {key}"
            # Fresh by the rules' own threshold (FRESH_S = 15 s) everywhere.
            assert 0 <= freshness[name][pool]["health"]["resource_freshness_s_max"] <= 15, where


def test_dead_region_goes_absent_on_the_global_prometheus(stacks: Stacks) -> None:
    # Runs last: it stops region-b for good.
    glob = Prometheus(stacks.federation.global_url, stacks.cluster.workdir)
    region_b = 'proxy_pool:instances:count{region="region-b"}'
    eventually(lambda: glob.query(region_b), bool, 15, "region-b's rollups before the stop")
    stop_group(stacks.federation.regions["region-b"].process)
    # No staleness markers for federated samples (they carry their own timestamps):
    # the series go when their last timestamp is older than the global lookback.
    bound = (LOOKBACK_INTERVALS + 2) * INTERVAL + 5
    eventually(lambda: glob.query('{__name__=~"proxy_pool:.+",region="region-b"}'),
               lambda r: r == [], bound, "region-b's rollups go absent")
    assert float(glob.query('up{region="region-b"}')[0]["value"][1]) == 0
    seen = eventually(lambda: pools(stacks.bridges["federated"]), lambda p: set(p) == {"pool-1"},
                      bound, "the federated bridge drops pool-2")
    assert seen["pool-1"]["instances"]["total"] == 2
