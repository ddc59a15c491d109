"""The Gateway API Inference Extension's endpoint picker (EPP), read from its /metrics.

Both generations of its names are read: `inference_objective_*` (v1.1 on) and
`inference_model_*` (v1.0), with the `inference_pool_*` families (label `name`,
the InferencePool). docs/gateways.md has the pages and what each family means.

Mapped:
- members: the endpoints `inference_pool_per_pod_queue_size` lists
  (`model_server_pod`), and alive: `inference_pool_ready_pods`, a pool-level
  count. The EPP keeps no per-endpoint liveness, so no member is called stale
  or alive by name, and the stale count is absent;
- inflight: the running requests (`*_running_requests`, per model);
- requests: the request counter (`*_request_total`): the requests the EPP
  scheduled, every outcome together (one it rejected at scheduling is counted in
  its error counter only).
The model-level families carry no pool label. An EPP serves one InferencePool,
so they are the pool's when the page holds one pool, and are left out otherwise.
Not mapped: the per-pod queue is the engines' waiting queue, not a Proxy queue
(the Instance exporters measure it), and the EPP has no Proxy-side queue of its own.
"""

from __future__ import annotations

from poolscope.exporters.proxy.gateways.pool import Endpoint, Page, PoolReading, Pools, by_pool

PREFIX = "inference_"
POOL_LABEL = "name"
_MEMBERS = "inference_pool_per_pod_queue_size"
_READY = "inference_pool_ready_pods"
# Newer name first: a page carries one generation.
_RUNNING = ("inference_objective_running_requests", "inference_model_running_requests")
_REQUESTS = ("inference_objective_request_total", "inference_model_request_total")
READ = (_MEMBERS, _READY, *_RUNNING, *_REQUESTS)


def _first(page: Page, names: tuple[str, ...]) -> list[tuple[dict[str, str], float]] | None:
    for name in names:
        if name in page:
            return [(dict(labels), value) for labels, value in page[name]]
    return None


def read(page: Page, pools: Pools) -> list[PoolReading]:
    readings: dict[str, PoolReading] = {}
    for pool, samples in by_pool(page.get(_MEMBERS, []), pools).items():
        reading = readings.setdefault(pool, PoolReading(pool))
        for labels, _ in samples:
            pod = labels.get("model_server_pod", "")
            reading.endpoints[pod] = Endpoint(pod)
    for pool, samples in by_pool(page.get(_READY, []), pools).items():
        readings.setdefault(pool, PoolReading(pool)).alive = sum(v for _, v in samples)
    if pools.fixed:
        assert pools.proxy_id is not None
        readings.setdefault(pools.proxy_id, PoolReading(pools.proxy_id))
    if len(readings) == 1:
        (reading,) = readings.values()
        running = _first(page, _RUNNING)
        if running is not None:
            reading.inflight = sum(v for _, v in running)
        requests = _first(page, _REQUESTS)
        if requests is not None:
            reading.requests_total = sum(v for _, v in requests)
    if _MEMBERS not in page and _READY not in page:
        return sorted(readings.values(), key=lambda r: r.proxy_id)  # no member count
    for reading in readings.values():
        reading.registered = float(len(reading.endpoints))
        if reading.alive is not None:
            # A ready endpoint the per-pod family has not listed yet is still a member.
            reading.registered = max(reading.registered, reading.alive)
    return sorted(readings.values(), key=lambda r: r.proxy_id)
