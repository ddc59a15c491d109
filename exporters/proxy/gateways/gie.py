"""The endpoint picker (EPP), read from its /metrics: the Gateway API Inference
Extension's (up to v1.5; GIE v1.6.0 ships none) and the llm-d router's, which
carries the EPP on.

Three generations of names are read, and for each family the newest one on the page:
- `llm_d_epp_*` (llm-d router v0.9.0 on), which still publishes the generation
  below beside it, with the same values and `[Deprecated: Use llm_d_epp_...]` in
  its HELP;
- `inference_objective_*` (GIE v1.1 to v1.5, and the llm-d router's deprecated copies);
- `inference_model_*` (GIE v1.0).
A page that carries two generations therefore gives the figures of either alone,
never their sum. The pool families carry the InferencePool as `name` in all three.
docs/gateways.md has the pages and what each family means.

Mapped:
- members: the endpoints the per-endpoint queue family lists, and alive: the
  ready-endpoint count, a pool-level count. The EPP keeps no per-endpoint
  liveness, so no member is called stale or alive by name, and the stale count
  is absent;
- inflight: the running requests (per model);
- requests: the request counter: the requests the EPP scheduled, every outcome
  together (one it rejected at scheduling is counted in its error counter only).
The model-level families carry no pool label. An EPP serves one InferencePool,
so they are the pool's when the page holds one pool, and are left out otherwise
(also when a second pool was left out for a pool name that is not a usable id).
Not mapped: the per-endpoint queue is the engines' waiting queue, not a Proxy queue
(the Instance exporters measure it), and the EPP has no Proxy-side queue of its own.
"""

from __future__ import annotations

from collections.abc import Iterable

from poolscope.exporters.common.plausible import AMOUNT, MEMBERS, POOL_REQUESTS, QUEUED
from poolscope.exporters.proxy.gateways.pool import Endpoint, Page, PoolReading, Pools

PREFIXES = ("llm_d_epp_", "inference_")
POOL_LABEL = "name"
# Each family read, newest generation first.
_MEMBERS = {  # the per-endpoint queue, and the label that names its endpoint
    "llm_d_epp_per_endpoint_queue_size": "model_server_endpoint",
    "inference_pool_per_pod_queue_size": "model_server_pod",
}
_READY = ("llm_d_epp_ready_endpoints", "inference_pool_ready_pods")
_RUNNING = ("llm_d_epp_request_running", "inference_objective_running_requests",
            "inference_model_running_requests")
_REQUESTS = ("llm_d_epp_request_total", "inference_objective_request_total",
             "inference_model_request_total")
# Each family read and its plausible range: the per-endpoint queue is an engine's
# waiting queue, the ready count a pool's members, the running count a pool's
# requests (per model), the request counter a counter.
READ = {**dict.fromkeys(_MEMBERS, QUEUED), **dict.fromkeys(_READY, MEMBERS),
        **dict.fromkeys(_RUNNING, POOL_REQUESTS), **dict.fromkeys(_REQUESTS, AMOUNT)}


def _newest(page: Page, names: Iterable[str]) -> str | None:
    """The newest generation of a family that the page has."""
    return next((name for name in names if name in page), None)


def _total(page: Page, names: Iterable[str]) -> float | None:
    name = _newest(page, names)
    return None if name is None else sum(v for _, v in page[name])


def read(page: Page, pools: Pools) -> list[PoolReading]:
    readings: dict[str, PoolReading] = {}
    members = _newest(page, _MEMBERS)
    if members is not None:
        for pool, pooled in page.by_pool(page[members], pools).items():
            reading = readings.setdefault(pool, PoolReading(pool))
            for labels, _ in pooled:
                endpoint = labels.get(_MEMBERS[members], "")
                reading.endpoints[endpoint] = Endpoint(endpoint)
    ready = _newest(page, _READY)
    if ready is not None:
        for pool, pooled in page.by_pool(page[ready], pools).items():
            readings.setdefault(pool, PoolReading(pool)).alive = sum(v for _, v in pooled)
    if pools.fixed:
        assert pools.proxy_id is not None
        readings.setdefault(pools.proxy_id, PoolReading(pools.proxy_id))
    # A page that held a pool left out for its label may have counted that pool's
    # requests too.
    if len(readings) == 1 and not page.skipped:
        (reading,) = readings.values()
        reading.inflight = _total(page, _RUNNING)
        reading.requests_total = _total(page, _REQUESTS)
    if members is None and ready is None:
        return sorted(readings.values(), key=lambda r: r.proxy_id)  # no member count
    for reading in readings.values():
        reading.registered = float(len(reading.endpoints))
        if reading.alive is not None:
            # A ready endpoint the per-endpoint family has not listed yet is still a member.
            reading.registered = max(reading.registered, reading.alive)
    return sorted(readings.values(), key=lambda r: r.proxy_id)
