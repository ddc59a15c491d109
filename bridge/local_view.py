"""One pool's per-Instance and per-queue view, for people: the Proxy bridge serves it
as `/debug/pool_resource?detail=local`, the Scheduler bridge's status pages drill down
with it. The Scheduler's summary never carries it (docs/design.md).

Everything comes from one evaluation time, so an Instance's freshness, liveness and
load cannot disagree with each other. Every value is a measurement or null: an
Instance never dispatched to has `idle: "unknown"` and null idle times (unknown is
not idle), a host without GPU readings has no GPU entries and a null device count,
a queue with nobody waiting has no oldest age.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from poolscope.bridge.local_queries import (
    FRESHNESS_RULE,
    RECENT_ERRORS_WINDOW,
    SEEN_RULE,
    UP,
    LocalSamples,
)
from poolscope.bridge.pool_series import PoolSeries, label_of, matching, one
from poolscope.bridge.summary import SCHEMA_VERSION, Sample
from poolscope.contract import catalog as c
from poolscope.contract.fields import BYTES_PER_S_TO_MBPS, PERCENT

COLLECTORS = ("host", "gpu", "engine")  # the Instance exporter's readers (exporters/instance)
GATEWAY_COLLECTOR = "gateway"  # the gateway adapter's reader (exporters/proxy/gateway.py)


@dataclass(frozen=True)
class LocalView:
    """The indexed series of one evaluation, shared by the detail and the diagnosis."""

    proxy_id: str
    evaluated_at: float
    series: PoolSeries
    queue_wait: Sequence[Sample]
    recent_errors: Sequence[Sample]

    @classmethod
    def of(cls, proxy_id: str, samples: LocalSamples) -> LocalView:
        return cls(proxy_id, samples.evaluated_at, PoolSeries.index(samples.raw),
                   samples.queue_wait, samples.recent_errors)

    @property
    def instance_ids(self) -> list[str]:
        return sorted(self.series.instances)

    @property
    def proxy_reporting(self) -> bool:
        """A Proxy-side exporter is scraped: its collector health series exists."""
        return c.PROXY_COLLECTOR_SUCCESS.name in self.series.pool

    @property
    def gateway(self) -> bool:
        """The Proxy side is a gateway adapter (collector="gateway"), whose members are
        named as the gateway names its endpoints, not as the Instance exporters."""
        return any(labels.get("collector") == GATEWAY_COLLECTOR for labels, _
                   in self.series.pool.get(c.PROXY_COLLECTOR_SUCCESS.name, []))

    def targets(self) -> list[dict[str, Any]]:
        """The pool's scrape targets (those whose target labels carry its proxy_id)."""
        return [{"job": labels.get("job"), "instance": labels.get("instance"),
                 "up": None if value is None else value == 1}
                for labels, value in sorted(self.series.pool.get(UP, []),
                                            key=lambda s: (s[0].get("job", ""),
                                                           s[0].get("instance", "")))]

    def collector(self, instance_id: str, name: str) -> dict[str, Any]:
        """A collector's last verdict and why it fails: the error reasons that grew in
        the recent window, or, before the window holds two samples, every reason it
        ever counted, most frequent first."""
        success = one(self.series.of(instance_id).get(c.COLLECTOR_SUCCESS.name, []),
                      collector=name)
        recent = _reasons(matching(self.recent_errors, instance_id=instance_id,
                                   collector=name))
        lifetime = _reasons(matching(
            self.series.of(instance_id).get(c.COLLECTOR_ERRORS.name, []), collector=name))
        return {"success": as_flag(success),
                "reasons": recent or lifetime,
                "reasons_over": RECENT_ERRORS_WINDOW if recent else "lifetime"}

    # --- the JSON document ------------------------------------------------------

    def document(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "proxy_id": self.proxy_id,
            "generated_at": self.evaluated_at,
            "detail": "local",
            "proxy": {"reporting": self.proxy_reporting, "gateway": self.gateway,
                      "collector_success": as_flag(one(
                          self.series.pool.get(c.PROXY_COLLECTOR_SUCCESS.name, []))),
                      "scrape_targets": self.targets()},
            "instances": [self.instance(i) for i in self.instance_ids],
            "queues": {q: self.queue(q) for q in c.QUEUES},
        }

    def instance(self, instance_id: str) -> dict[str, Any]:
        s = self.series.of(instance_id)

        def get(name: str, **labels: str) -> float | None:
            return one(s.get(name, []), **labels)

        registered = get(c.PROXY_INSTANCE_REGISTERED.name)
        idle = get(c.PROXY_INSTANCE_IDLE.name)
        host = matching(s.get(c.COLLECTOR_SUCCESS.name, []), collector="host")
        return {
            "instance_id": instance_id,
            # Not in the Proxy's registry is a fact only while the Proxy reports it.
            "registered": (registered == 1 if registered is not None
                           else (False if self.proxy_reporting else None)),
            "alive": as_flag(get(c.PROXY_INSTANCE_ALIVE.name)),
            "heartbeat_age_s": get(c.PROXY_INSTANCE_HEARTBEAT_AGE.name),
            # Its exporter answers Prometheus now; false: it did within the member
            # memory and no longer does (how a pool without a Proxy exporter goes stale).
            "host_scraped": (True if host
                             else False if get(SEEN_RULE) is not None else None),
            # The age the pool's with_resource count compares with its threshold.
            "host_sample_age_s": get(c.COLLECTOR_SAMPLE_AGE.name, collector="host"),
            "resource_freshness_s": get(FRESHNESS_RULE),
            "cpu_percent": _scaled(get(c.HOST_CPU_UTILIZATION.name), PERCENT),
            "memory_used_ratio": _ratio(get(c.HOST_MEMORY_USED.name),
                                        get(c.HOST_MEMORY_TOTAL.name)),
            "gpu_devices": as_count(get(c.GPU_DEVICES.name)),
            "gpus": _gpus(s),
            "network_rx_mbps": _scaled(get(c.HOST_NETWORK_RECEIVE_RATE.name),
                                       BYTES_PER_S_TO_MBPS),
            "network_tx_mbps": _scaled(get(c.HOST_NETWORK_TRANSMIT_RATE.name),
                                       BYTES_PER_S_TO_MBPS),
            "admission_state": _state(s.get(c.INSTANCE_ADMISSION_STATE.name, [])),
            "engine": {
                "source": label_of(s.get(c.ENGINE_REQUESTS_RUNNING.name, [])
                                   + s.get(c.ENGINE_REQUESTS_WAITING.name, []), "source"),
                "running": get(c.ENGINE_REQUESTS_RUNNING.name),
                "waiting": get(c.ENGINE_REQUESTS_WAITING.name),
                "kv_cache_usage_ratio": get(c.ENGINE_KV_CACHE_USAGE.name),
            },
            "proxy_inflight": get(c.PROXY_INSTANCE_INFLIGHT.name),
            "capacity": _capacity(s),
            "idle": "unknown" if idle is None else "measured",
            "idle_s": idle,
            "idle_since": get(c.PROXY_INSTANCE_LAST_DISPATCH.name),
            "collectors": {name: self.collector(instance_id, name) for name in COLLECTORS},
        }

    def queue(self, name: str) -> dict[str, Any]:
        pool = self.series.pool
        return {
            "depth": one(pool.get(c.PROXY_QUEUE_DEPTH.name, []), queue=name),
            "capacity": one(pool.get(c.PROXY_QUEUE_CAPACITY.name, []), queue=name),
            "oldest_age_s": one(pool.get(c.PROXY_QUEUE_OLDEST_AGE.name, []), queue=name),
            "mean_wait_s_1m": one(self.queue_wait, queue=name),
        }


def as_flag(value: float | None) -> bool | None:
    """A 0/1 series as a verdict; None when absent or ambiguous (unknown, not false)."""
    return None if value is None else value == 1


def _scaled(value: float | None, scale: float) -> float | None:
    return None if value is None else value * scale


def _ratio(used: float | None, total: float | None) -> float | None:
    if used is None or total is None or total <= 0 or used < 0:
        return None
    return used / total


def as_count(value: float | None) -> int | None:
    """A series that counts things; None unless a whole number of them (a NaN, a
    negative or a fraction is no count)."""
    if value is None or value < 0 or not value.is_integer():
        return None
    return int(value)


def _reasons(samples: Sequence[Sample]) -> list[str]:
    counted = sorted(((v, labels.get("reason", "")) for labels, v in samples
                      if v is not None and v > 0), key=lambda x: (-x[0], x[1]))
    return [reason for _, reason in counted]


def _state(samples: Sequence[Sample]) -> str | None:
    """The one state whose series is 1; None when none or several are."""
    states = {labels.get("state") for labels, value in samples if value == 1}
    return states.pop() if len(states) == 1 else None


def asleep(s: Mapping[str, list[Sample]]) -> bool:
    """Whether the Instance's exporter says its engine is asleep: it then has no
    capacity, whatever is configured for it (the pool's capacity rollup leaves it out)."""
    return one(s.get(c.INSTANCE_ADMISSION_STATE.name, []), state="asleep") == 1


def _capacity(s: Mapping[str, list[Sample]]) -> dict[str, Any]:
    """The Proxy's configured value wins over the Instance exporter's, as in the pool's
    capacity rollup: the Proxy is what enforces it. An asleep engine has none, as the
    rollup counts it: it serves nothing until woken."""
    if asleep(s):
        return {"value": None, "source": None}
    for family in (c.PROXY_INSTANCE_CAPACITY, c.INSTANCE_CAPACITY):
        samples = s.get(family.name, [])
        value = one(samples)
        if value is not None:
            return {"value": value, "source": label_of(samples, "source")}
    return {"value": None, "source": None}


def _gpus(s: Mapping[str, list[Sample]]) -> list[dict[str, Any]]:
    """One entry per GPU NVML listed; usage only for healthy ones (unhealthy is not free)."""
    out = []
    for labels, healthy in sorted(s.get(c.GPU_HEALTHY.name, []),
                                  key=lambda x: (len(x[0].get("gpu", "")), x[0].get("gpu", ""))):
        uuid = labels.get("gpu_uuid", "")
        ok = healthy == 1
        out.append({
            "gpu": labels.get("gpu"), "gpu_uuid": uuid, "gpu_model": labels.get("gpu_model"),
            "healthy": as_flag(healthy),
            "util_percent": _scaled(one(s.get(c.GPU_UTILIZATION.name, []), gpu_uuid=uuid),
                                    PERCENT) if ok else None,
            "memory_used_ratio": _ratio(
                one(s.get(c.GPU_MEMORY_USED.name, []), gpu_uuid=uuid),
                one(s.get(c.GPU_MEMORY_TOTAL.name, []), gpu_uuid=uuid)) if ok else None,
        })
    return out
