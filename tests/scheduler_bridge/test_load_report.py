"""A Scheduler receives a Proxy's load report: validated whole, its age on the
receiver's clock whatever the Proxy's says."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from poolscope.exporters.proxy import ProxyExporter
from poolscope.scheduler_bridge.client import parse_pool
from poolscope.scheduler_bridge.load_report import InvalidReport, LoadReport, receive_report
from tests.proxy.conftest import FakeClock

PID = "pool-1"
RECEIVED_AT = 1_800_000_000.0


def _wire(report: dict[str, Any]) -> dict[str, Any]:
    """As a heartbeat carries it: JSON text and back."""
    doc: dict[str, Any] = json.loads(json.dumps(report))
    return doc


def _exporter(clock: FakeClock | None = None) -> ProxyExporter:
    """An embedded Proxy of two members, one asleep, and a ready line of three."""
    exporter = ProxyExporter(PID, clock=clock or FakeClock())
    exporter.instances.register("i-1", "http://i-1", capacity=4)
    exporter.instances.register("i-2", "http://i-2", capacity=2)
    exporter.instances.set_admission_state("i-1", "accepting")
    exporter.instances.set_admission_state("i-2", "asleep")
    exporter.add_queue("ready", lambda: 3)
    return exporter


def _real_report(clock: FakeClock | None = None) -> dict[str, Any]:
    return _wire(_exporter(clock).load_report())


async def test_a_real_report_round_trips() -> None:
    exporter = _exporter()
    async with exporter.dispatch.track("i-1"):
        doc = _wire(exporter.load_report())
    received = receive_report(doc, RECEIVED_AT)
    assert received.pool == parse_pool(doc)
    assert received.proxy_id == PID
    assert (received.pool.load.inflight_total, received.pool.load.capacity,
            received.pool.load.ready_queue_depth) == (1.0, 4.0, 3.0)
    assert received.pool.health.pool_admission_state == "accepting"
    assert received.received_at == RECEIVED_AT
    age = doc["generated_at"] - doc["load"]["inflight_sampled_at"]
    assert received.measured_at == RECEIVED_AT - age


def test_a_sample_older_than_its_report_ages_the_report() -> None:
    """A gateway's inflight may be read before the report is written."""
    doc = _real_report()
    doc["load"]["inflight_sampled_at"] = doc["generated_at"] - 1.5
    received = receive_report(doc, RECEIVED_AT)
    assert received.measured_at == RECEIVED_AT - 1.5
    assert received.age_s(RECEIVED_AT + 1.0) == 2.5
    assert received.age_s(received.measured_at - 5.0) == 0.0  # never < 0


@pytest.mark.parametrize("skew_s", [100.0, -100.0])
def test_a_proxy_clock_off_by_100_s_still_gets_the_receivers_clock(skew_s: float) -> None:
    clock = FakeClock()
    clock.now_wall = RECEIVED_AT + skew_s
    doc = _real_report(clock)
    assert doc["generated_at"] == RECEIVED_AT + skew_s
    received = receive_report(doc, RECEIVED_AT)
    assert received.measured_at == RECEIVED_AT
    assert received.age_s(RECEIVED_AT + 2.0) == 2.0


def test_keys_it_does_not_know_are_ignored() -> None:
    """Fields are only ever added: a later Proxy's report is read by an older receiver."""
    doc = _real_report()
    doc["load"]["engine_preempted_total"] = "a later field"
    doc["heartbeat_seq"] = 7
    doc["health"]["later"] = [1]
    assert receive_report(doc, RECEIVED_AT).pool == parse_pool(doc)


DROP = object()


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """Sets the value at a dotted path, or deletes its key for DROP."""
    def mutate(doc: dict[str, Any]) -> None:
        *parents, key = path.split(".")
        for parent in parents:
            doc = doc[parent]
        if value is DROP:
            del doc[key]
        else:
            doc[key] = value
    return mutate


MALFORMED = [
    ("schema_version", _set("schema_version", 2)),
    ("schema_version", _set("schema_version", True)),
    ("schema_version", _set("schema_version", DROP)),
    ("proxy_id", _set("proxy_id", "")),
    ("proxy_id", _set("proxy_id", "a pool")),
    ("proxy_id", _set("proxy_id", 7)),
    ("proxy_id", _set("proxy_id", DROP)),
    ("generated_at", _set("generated_at", math.nan)),
    ("generated_at", _set("generated_at", math.inf)),
    ("generated_at", _set("generated_at", "1800000000")),
    ("generated_at", _set("generated_at", None)),
    ("load", _set("load", [1.0])),
    ("load", _set("load", DROP)),
    ("load.capacity", _set("load.capacity", -1.0)),
    ("load.capacity", _set("load.capacity", math.nan)),
    ("load.inflight_total", _set("load.inflight_total", math.inf)),
    ("load.inflight_total", _set("load.inflight_total", "3")),
    ("load.ready_queue_depth", _set("load.ready_queue_depth", True)),
    ("load.inflight_sampled_at", _set("load.inflight_sampled_at", DROP)),
    ("load.inflight_sampled_at", _set("load.inflight_sampled_at", None)),
    ("load.inflight_sampled_at", _set("load.inflight_sampled_at", -math.inf)),
    ("load.inflight_sampled_at", _set("load.inflight_sampled_at", RECEIVED_AT * 2)),
    ("health", _set("health", "accepting")),
    ("health.pool_admission_state", _set("health.pool_admission_state", 5)),
]


@pytest.mark.parametrize(("key", "mutate"), MALFORMED)
def test_a_malformed_report_is_refused_naming_its_key(
        key: str, mutate: Callable[[dict[str, Any]], None]) -> None:
    doc = _real_report()
    mutate(doc)
    with pytest.raises(InvalidReport, match=re.escape(f"`{key}`")):
        receive_report(doc, RECEIVED_AT)


@pytest.mark.parametrize("body", [None, [], "{}", 3])
def test_a_body_that_is_no_object_is_refused(body: Any) -> None:
    with pytest.raises(InvalidReport, match="JSON object"):
        receive_report(body, RECEIVED_AT)


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_a_load_value_is_received_only_as_a_measured_amount(value: float) -> None:
    doc = _real_report()
    doc["load"]["capacity"] = value
    if math.isfinite(value) and value >= 0:
        assert isinstance(receive_report(doc, RECEIVED_AT), LoadReport)
    else:
        with pytest.raises(InvalidReport, match=re.escape("`load.capacity`")):
            receive_report(doc, RECEIVED_AT)
