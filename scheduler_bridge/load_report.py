"""Receiving a Proxy's load report: the short path a Scheduler ranks pools by.

A Proxy reads its report at `generated_at` by its own clock (its heartbeat body, or the
demo's GET /v1/pool_load; the wire shape is bridge/schema/load_report.schema.json).
That clock may be off the receiver's by any amount, so the two are never compared: the
report's own age, `generated_at - load.inflight_sampled_at` (both the Proxy's clock),
is anchored on the receiver's clock at the moment it arrived. Delivery takes seconds at
most and is not counted, so an age errs fresh by it; a receiver drops a report older
than about three heartbeat periods (docs/design.md, "The load report").

Validation stands without jsonschema, a dev dependency only: a body is refused whole,
with one message naming the offending key, rather than half read. Keys it does not
know are ignored, since fields are only ever added.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from poolscope.bridge.summary import SCHEMA_VERSION
from poolscope.scheduler_bridge.client import PoolSummary, parse_pool
from poolscope.scheduler_bridge.client_fields import Load
from poolscope.service.identity import ID_RULE, valid_id

# How far a sample may postdate the report that carries it: a Proxy that reads its
# wall clock twice may see it stepped back between the reads.
_SAMPLED_AHEAD_S = 1.0
_LOAD_KEYS = tuple(f.name for f in dataclasses.fields(Load))


class InvalidReport(ValueError):
    """The body is not a load report; the message names the offending key."""


@dataclass(frozen=True)
class LoadReport:
    """One report as received: the pool it describes and when, on the receiver's clock."""

    pool: PoolSummary
    received_at: float  # the receiver's wall clock when it arrived
    # On the receiver's clock: received_at less the report's own age (by the Proxy's
    # clock, generated_at - load.inflight_sampled_at, never < 0).
    measured_at: float

    @property
    def proxy_id(self) -> str:
        return self.pool.proxy_id

    def age_s(self, now: float) -> float:
        """Seconds since the load was measured, at the receiver's `now`; never < 0."""
        return max(0.0, now - self.measured_at)


def _number(value: Any, key: str) -> float:
    """`value` if a finite JSON number (a bool is not one), else InvalidReport."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidReport(f"load report: `{key}` must be a finite number, not {value!r}")
    return float(value)


def _object(doc: dict[str, Any], key: str) -> dict[str, Any]:
    value = doc.get(key)
    if not isinstance(value, dict):
        raise InvalidReport(f"load report: `{key}` must be an object, not {value!r}")
    return value


def _check_load(load: dict[str, Any], generated_at: float) -> None:
    """Every load value it knows null or a measured amount, and its sample time there,
    no later than the report."""
    for key in _LOAD_KEYS:
        value = load.get(key)
        if value is not None and _number(value, f"load.{key}") < 0:
            raise InvalidReport(f"load report: `load.{key}` must be at least 0, not {value!r}")
    sampled_at = load.get("inflight_sampled_at")
    if sampled_at is None:
        raise InvalidReport("load report: `load.inflight_sampled_at` is required")
    if sampled_at > generated_at + _SAMPLED_AHEAD_S:
        raise InvalidReport(f"load report: `load.inflight_sampled_at` {sampled_at!r} is "
                            f"after the report's generated_at {generated_at!r}")


def _check_health(doc: dict[str, Any]) -> None:
    if doc.get("health") is None:
        return
    state = _object(doc, "health").get("pool_admission_state")
    if state is not None and not isinstance(state, str):
        raise InvalidReport("load report: `health.pool_admission_state` must be a string "
                            f"or null, not {state!r}")


def receive_report(doc: Any, received_at: float) -> LoadReport:
    """Parse and validate one report body (a dict from JSON)."""
    if not isinstance(doc, dict):
        raise InvalidReport(f"load report: the body must be a JSON object, not "
                            f"{type(doc).__name__}")
    version = doc.get("schema_version")
    if isinstance(version, bool) or version != SCHEMA_VERSION:
        raise InvalidReport(f"load report: `schema_version` must be {SCHEMA_VERSION}, "
                            f"not {version!r}")
    proxy_id = doc.get("proxy_id")
    if not isinstance(proxy_id, str) or not valid_id(proxy_id):
        raise InvalidReport(f"load report: `proxy_id` must be an id ({ID_RULE}), "
                            f"not {proxy_id!r}")
    generated_at = _number(doc.get("generated_at"), "generated_at")
    load = _object(doc, "load")
    _check_load(load, generated_at)
    _check_health(doc)
    age = max(0.0, generated_at - load["inflight_sampled_at"])
    return LoadReport(parse_pool(doc), received_at, received_at - age)
