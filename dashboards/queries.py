"""What every Poolscope dashboard's panels are made of: the selectors, the
variables that fill them, and the state sets the state timelines map.

Every selector also matches `region` and `cluster`, so one dashboard serves a
single Prometheus and the federated global one (deploy/federation/: each
region Prometheus sets both as external labels, which /federate attaches to
every rollup). The Region variable lists the regions the global Prometheus
holds, Cluster the clusters of the selected regions, and Pool the pools of
those. "All" sends `.*`, which also matches a series without the label, as on
a single Prometheus, which sets neither.
"""

from __future__ import annotations

from dashboards.grafana import StateSet, Target, query_variable

WHERE = 'region=~"$region",cluster=~"$cluster"'
POOLS = WHERE + ',proxy_id=~"$proxy_id"'
ONE_INSTANCE = POOLS + ',instance_id="$instance_id"'
RATE = "[$__rate_interval]"

DATA_QUALITY = StateSet("proxy_pool:data_quality", "quality", (
    ("complete", "green"), ("partial", "#EAB839"), ("missing", "red")))
ADMISSION_STATES = (("accepting", "green"), ("degraded", "#EAB839"), ("saturated", "orange"),
                    ("asleep", "purple"), ("draining", "blue"), ("unknown", "text"))
POOL_ADMISSION = StateSet("proxy_pool:admission_state", "state", ADMISSION_STATES)
INSTANCE_ADMISSION = StateSet("poolscope_instance_admission_state", "state", ADMISSION_STATES)
ALIVE = ((1, "alive", "green"), (0, "stale", "red"))
HEALTHY = ((1, "healthy", "green"), (0, "unhealthy", "red"))
COLLECTOR_OK = ((1, "ok", "green"), (0, "failed", "red"))


def sel(metric: str, matchers: str = POOLS) -> str:
    return f"{metric}{{{matchers}}}"


def per_pool(metric: str, legend: str = "{{proxy_id}}") -> Target:
    return Target(sel(metric), legend)


def avg_and_max(rollup: str) -> tuple[Target, Target]:
    """A pool's mean over its members and its worst one: the max shows the one stuck or
    hot member that the mean hides."""
    return (per_pool(f"{rollup}:avg", "{{proxy_id}} avg"),
            per_pool(f"{rollup}:max", "{{proxy_id}} max"))


def quantiles(histogram: str, by: str, matchers: str, legend: str) -> tuple[Target, ...]:
    """p50/p95/p99 from a histogram; `>= 0` drops the NaN of a window with no
    observations, so an idle queue shows a gap instead of a made-up latency."""
    return tuple(
        Target(f"histogram_quantile({q}, sum by ({by}, le) "
               f"(rate({histogram}_bucket{{{matchers}}}{RATE}))) >= 0",
               f"{legend} p{round(q * 100)}")
        for q in (0.5, 0.95, 0.99))


def rate_by(counter: str, by: str, matchers: str, legend: str) -> Target:
    return Target(f"sum by ({by}) (rate({counter}{{{matchers}}}{RATE}))", legend)


REGION_VARIABLE = query_variable("region", "Region",
                                 "label_values(proxy_pool:instances:count, region)",
                                 multi=True, all_value=".*")
CLUSTER_VARIABLE = query_variable(
    "cluster", "Cluster",
    'label_values(proxy_pool:instances:count{region=~"$region"}, cluster)',
    multi=True, all_value=".*")
POOL_VARIABLE = query_variable("proxy_id", "Pool",
                               f"label_values(proxy_pool:instances:count{{{WHERE}}}, proxy_id)",
                               multi=True)
INSTANCE_VARIABLE = query_variable(
    "instance_id", "Instance",
    f"label_values(poolscope_proxy_instance_registered{{{POOLS}}}, instance_id)",
    multi=False)
PLACE = (REGION_VARIABLE, CLUSTER_VARIABLE)
