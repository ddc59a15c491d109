"""The load report: the few pool summary fields a Proxy measures itself, read on demand.

The short path for the fields a Scheduler ranks pools by: a Proxy attaches the report
to its heartbeats, so the Scheduler sees load that it did not send about one heartbeat
late instead of one scrape plus one rule evaluation late (docs/scheduling.md measures
both). Its fields are a subset of the summary's, named here by path; the exporters do
not import the bridges, so the bridge renders the report's JSON Schema from the
summary's entries of these paths (poolscope.bridge.render, docs/design.md "The load
report"), and poolscope.scheduler_bridge.load_report receives it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from poolscope.contract.catalog import ADMISSION_LEVELS, QUEUES
from poolscope.exporters.instance.admission import AdmissionState
from poolscope.exporters.proxy.registry import Instance

# The pool summary's schema (poolscope.bridge.summary.SCHEMA_VERSION), which the load
# report is a part of; a test keeps the two equal.
REPORT_SCHEMA_VERSION = 1


def queue_depth_path(queue: str) -> str:
    """The summary field of one of the catalog's QUEUES."""
    return f"load.{queue}_queue_depth"


# Every field the report carries, each always present (null: not measured), so a report
# is exactly these keys beside schema_version, proxy_id and generated_at.
REPORT_PATHS: tuple[str, ...] = (
    "load.inflight_total",
    "load.capacity",
    *map(queue_depth_path, QUEUES),
    "load.inflight_sampled_at",
    "health.pool_admission_state",
)


def awake(alive: Sequence[Instance]) -> list[Instance]:
    """The members that can serve now: asleep ones offer no capacity until woken, as the
    pool rules count them (rules/proxy_pool.yml, proxy_pool:capacity_requests:sum);
    one that states no admission state is taken to serve."""
    return [i for i in alive if i.admission_state != AdmissionState.ASLEEP]


def pool_admission_state(alive: Sequence[Instance]) -> str | None:
    """The best state the alive members offer (ADMISSION_LEVELS), as the summary's
    `health.pool_admission_state`. None while none is alive or one states no state: it
    may offer better than every stated one, so a pool whose awake members say nothing
    is never reported asleep."""
    stated = [i.admission_state for i in alive if i.admission_state is not None]
    if not stated or len(stated) < len(alive):
        return None
    return max(stated, key=ADMISSION_LEVELS.__getitem__)


def shape(proxy_id: str, read_at: float, values: Mapping[str, Any]) -> dict[str, Any]:
    """The report of `values` by path, read at `read_at` (the Proxy's wall clock): every
    REPORT_PATHS key, None for those not in `values`, in the summary's sections."""
    report: dict[str, Any] = {"schema_version": REPORT_SCHEMA_VERSION, "proxy_id": proxy_id,
                              "generated_at": read_at}
    for path in REPORT_PATHS:
        section, _, key = path.partition(".")
        report.setdefault(section, {})[key] = values.get(path)
    return report
