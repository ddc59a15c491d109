"""The benchmark's fleet target serves exactly the catalog's series, in valid exposition format.

If it drifted from the catalog, the rule benchmark would measure rules
against series no exporter publishes.
"""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench.fleet_target import GATEWAY_ONLY, Fleet
from poolscope.contract import catalog


def _parse(fleet: Fleet) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    families: dict[str, list[tuple[str, dict[str, str], float]]] = {}
    for shard in fleet.shards():
        for family in text_string_to_metric_families(shard.body.decode()):
            samples = families.setdefault(family.name, [])
            samples.extend((s.name, s.labels, s.value) for s in family.samples)
    return families


def test_serves_every_catalog_family_with_its_labels() -> None:
    fleet = Fleet(instances=3, proxies=2, gpus=2, shard_size=2, start=1000.0)
    fleet.render(1010.0)
    parsed = _parse(fleet)
    # The simulated Proxies are embedded ones: gateway-mode collector health is
    # not theirs to publish (exporters/proxy/collector.py).
    # Nor is a collector with nothing to read: every simulated one reads.
    for family in catalog.all_families():
        if family.name in GATEWAY_ONLY or family == catalog.COLLECTOR_UNAVAILABLE:
            continue
        base = family.name.removesuffix("_total") if family.kind == "counter" else family.name
        samples = parsed.pop(base)
        assert samples, family.name
        for _, labels, _ in samples:
            assert set(family.labels) <= labels.keys(), (family.name, labels)
    assert parsed == {}
    assert sum(len(v) for v in _parse(fleet).values()) == fleet.series


def test_each_instance_belongs_to_one_proxy_and_counters_advance() -> None:
    fleet = Fleet(instances=4, proxies=2, gpus=1, start=1000.0)
    fleet.render(1010.0)
    registered = _parse(fleet)["poolscope_proxy_instance_registered"]
    owners = {labels["instance_id"]: labels["proxy_id"] for _, labels, _ in registered}
    assert len(owners) == 4 and set(owners.values()) == {"proxy-0000", "proxy-0001"}
    before = _parse(fleet)["poolscope_proxy_requests"]
    fleet.render(1020.0)
    after = _parse(fleet)["poolscope_proxy_requests"]
    assert all(a[2] > b[2] for a, b in zip(after, before, strict=True))


def test_gpu_aggregates_agree_with_the_per_gpu_series() -> None:
    """The rules read the aggregates; they must say what the fleet's GPUs say."""
    fleet = Fleet(instances=2, proxies=1, gpus=3, start=1000.0)
    fleet.render(1010.0)
    parsed = _parse(fleet)

    def per_instance(family: catalog.Family, **match: str) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        for _, labels, value in parsed[family.name]:
            if match.items() <= labels.items():
                assert labels["gpu_model"] == "H100", labels
                out.setdefault(labels["instance_id"], []).append(value)
        return out

    util = per_instance(catalog.GPU_UTILIZATION)
    assert len(util) == 2 and all(len(v) == 3 for v in util.values())
    assert per_instance(catalog.INSTANCE_GPUS, health="healthy") == {i: [3] for i in util}
    assert per_instance(catalog.INSTANCE_GPUS, health="unhealthy") == {i: [0] for i in util}
    assert [v for _, _, v in parsed[catalog.GPU_DEVICES.name]] == [3, 3]
    for agg, raw, combine in (
            (catalog.INSTANCE_GPU_UTILIZATION_SUM, catalog.GPU_UTILIZATION, sum),
            (catalog.INSTANCE_GPU_UTILIZATION_MAX, catalog.GPU_UTILIZATION, max),
            (catalog.INSTANCE_GPU_MEMORY_USED_SUM, catalog.GPU_MEMORY_USED, sum),
            (catalog.INSTANCE_GPU_MEMORY_TOTAL_SUM, catalog.GPU_MEMORY_TOTAL, sum)):
        expected = {i: [pytest.approx(combine(v))] for i, v in per_instance(raw).items()}
        assert per_instance(agg) == expected, agg.name


def test_a_gpu_less_fleet_has_no_gpu_series() -> None:
    fleet = Fleet(instances=2, proxies=1, gpus=0, start=1000.0)
    fleet.render(1010.0)
    gpu_families = {f.name for f in catalog.all_families() if "gpu_model" in f.labels}
    served = {name for name, samples in _parse(fleet).items() if samples}
    assert gpu_families and not gpu_families & served


def test_pool_series_agree_with_the_per_instance_series() -> None:
    """The new rules read the Proxy's pool series; they must say what its Instances say."""
    fleet = Fleet(instances=5, proxies=2, gpus=1, start=1000.0)
    fleet.render(1010.0)
    parsed = _parse(fleet)

    def by_proxy(family: catalog.Family) -> dict[str, float]:
        out: dict[str, float] = {}
        for _, labels, value in parsed[family.name]:
            out[labels["proxy_id"]] = out.get(labels["proxy_id"], 0.0) + value
        return out

    registered = by_proxy(catalog.PROXY_INSTANCE_REGISTERED)
    assert registered == {"proxy-0000": 3, "proxy-0001": 2}
    assert by_proxy(catalog.POOL_INSTANCES_REGISTERED) == registered
    assert by_proxy(catalog.POOL_INSTANCES_ALIVE) == by_proxy(catalog.PROXY_INSTANCE_ALIVE)
    assert set(by_proxy(catalog.POOL_INSTANCES_STALE).values()) == {0}
    assert by_proxy(catalog.POOL_INFLIGHT) == by_proxy(catalog.PROXY_INSTANCE_INFLIGHT)
    assert by_proxy(catalog.POOL_CAPACITY) == by_proxy(catalog.PROXY_INSTANCE_CAPACITY)
    # Every Instance was dispatched to a moment ago: none idle, none unknown.
    assert set(by_proxy(catalog.POOL_INSTANCES_IDLE).values()) == {0}
    assert set(by_proxy(catalog.POOL_INSTANCES_IDLE_UNKNOWN).values()) == {0}
    states = {labels["instance_id"]: labels["state"]
              for _, labels, value in parsed[catalog.INSTANCE_ADMISSION_STATE.name] if value == 1}
    levels = {labels["instance_id"]: value
              for _, labels, value in parsed[catalog.INSTANCE_ADMISSION_LEVEL.name]}
    assert levels == {i: catalog.ADMISSION_LEVELS[s] for i, s in states.items()}
    assert len(levels) == 5


def test_sources_are_the_ones_the_rules_select() -> None:
    """Labelled as the real exporters label them, or the rules' fallbacks are timed."""
    fleet = Fleet(instances=2, proxies=1, gpus=1, start=1000.0)
    fleet.render(1010.0)
    parsed = _parse(fleet)
    expected = {
        catalog.POOL_INSTANCES_REGISTERED: catalog.SOURCE_PROXY_REGISTRY,
        catalog.POOL_INSTANCES_IDLE: catalog.SOURCE_PROXY_DISPATCH,
        catalog.POOL_INFLIGHT: catalog.SOURCE_PROXY_DISPATCH,
        catalog.POOL_CAPACITY: catalog.SOURCE_CONFIGURED,
        catalog.PROXY_INSTANCE_ALIVE: catalog.SOURCE_PROXY_REGISTRY,
        catalog.PROXY_QUEUE_DEPTH: catalog.SOURCE_PROXY_QUEUE,
        catalog.HOST_CPU_UTILIZATION: catalog.SOURCE_PSUTIL,
        catalog.INSTANCE_GPUS: catalog.SOURCE_NVML,
        catalog.ENGINE_REQUESTS_RUNNING: catalog.engine_source("vllm"),
        catalog.COLLECTOR_SAMPLE_AGE: catalog.SOURCE_EXPORTER,
    }
    for family, source in expected.items():
        assert {labels["source"] for _, labels, _ in parsed[family.name]} == {source}, family.name
    assert {labels["source"] for _, labels, _ in parsed["poolscope_proxy_requests"]} == {
        catalog.SOURCE_PROXY_DISPATCH}
    assert {labels["collector"] for _, labels, _ in
            parsed[catalog.PROXY_COLLECTOR_SUCCESS.name]} == {"proxy"}
