"""The `pool_resource` object a Proxy attaches to its register / heartbeat messages.

It is the compact summary, exactly what the Scheduler bridge serves for the pool, so
the Scheduler sees one shape whichever path a summary takes. Consumers written against
the first published `pool_resource` example read its keys; those keys are
guaranteed here (docs/design.md, "The pool summary"), null when a future summary lacked
one, because such a consumer may index a key directly while it ignores any key it does
not know.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The first published pool_resource example, key by key (its values were illustrations).
PUBLISHED_KEYS: dict[str, tuple[str, ...]] = {
    "schema_version": (),
    "proxy_id": (),
    "generated_at": (),
    "metric_source": ("inflight", "qps_1m", "resource", "queue_depth"),
    "instances": ("total", "alive", "stale", "with_resource", "missing_resource"),
    "load": ("inflight_total", "qps_1m_total", "load_ratio", "capacity", "queue_pressure"),
    "utilization": ("cpu_avg", "cpu_max", "memory_used_ratio", "gpu_util_avg",
                    "gpu_util_max", "gpu_mem_used_ratio", "network_rx_mbps_total",
                    "network_tx_mbps_total"),
    "health": ("resource_freshness_s_avg", "resource_freshness_s_max",
               "pool_admission_state", "data_quality"),
}


def heartbeat_payload(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The summary as the heartbeat's `pool_resource`: a copy, with every published key."""
    payload = {k: dict(v) if isinstance(v, Mapping) else v for k, v in summary.items()}
    for key, subkeys in PUBLISHED_KEYS.items():
        if not subkeys:
            payload.setdefault(key, None)
            continue
        section = payload.get(key)
        if not isinstance(section, dict):
            section = payload[key] = {}
        for sub in subkeys:
            section.setdefault(sub, None)
    return payload
