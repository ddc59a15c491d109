"""The demo cluster, whose Prometheus also serves the console page."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from deploy.demo.cluster import Cluster
from harness.cluster import demo_cluster
from harness.prometheus import Prometheus

PROXY_IDS = frozenset({"pool-1", "pool-2"})


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with demo_cluster(tmp_path_factory.mktemp("demo"), proxies=2, instances=2, rate=3) as c:
        yield c


# What the fleet overview shows, per pool: ready when both pools have each.
# QPS comes last (rate() needs two samples of traffic), so it is waited for first.
READY = ("proxy_pool:requests:rate1m > 0", "proxy_pool:load:ratio",
         "proxy_pool:saturation:ratio", "proxy_pool:queue_pressure:ratio",
         "proxy_pool:instances_alive:count", "proxy_pool:data_quality == 1",
         "proxy_pool:admission_state == 1")


@pytest.fixture(scope="package")
def prom(cluster: Cluster) -> Prometheus:
    prom = Prometheus(cluster.prometheus_url, cluster.workdir)
    for expr in READY:
        prom.wait_for(f"count({expr}) == {len(PROXY_IDS)}", timeout=90)
    return prom
