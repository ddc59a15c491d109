"""The drill-down's verdicts per Instance: each from the source the pool's counts use,
and unknown wherever nothing says."""

from __future__ import annotations

from typing import Any

import pytest

from poolscope.contract.thresholds import FRESH_S
from poolscope.scheduler_bridge.status.pool_view import build_pool_detail
from poolscope.scheduler_bridge.status.text import Style, render_pool_text, sparkline
from tests.status.fleet import busy_pool, summaries


def instance(**changes: Any) -> dict[str, Any]:
    """An Instance as the local view documents it: alive, fresh, 2 of 8 in flight."""
    doc: dict[str, Any] = {
        "instance_id": "i-1", "registered": True, "alive": True, "heartbeat_age_s": 1.0,
        "host_scraped": True, "resource_freshness_s": 5.0, "host_sample_age_s": 2.0,
        "cpu_percent": 40.0,
        "memory_used_ratio": 0.5, "gpu_devices": None, "gpus": [],
        "admission_state": "accepting",
        "engine": {"source": "engine:vllm", "running": 3, "waiting": 1,
                   "kv_cache_usage_ratio": 0.25},
        "proxy_inflight": 2, "capacity": {"value": 8, "source": "configured"},
        "idle": "measured", "idle_s": 4.0, "idle_since": 1.0,
        "collectors": {"host": {"success": True, "reasons": [], "reasons_over": "lifetime"}},
    }
    doc.update(changes)
    return doc


def detail(*instances: dict[str, Any], reporting: bool = True,
           gateway: bool = False) -> dict[str, Any]:
    return {"proxy_id": "p", "generated_at": 1.0, "stale": False, "age_s": 0.5,
            "summary": summaries(busy_pool("p"))["p"], "trends": None,
            "trends_error": "canned",
            "local": {"proxy": {"reporting": reporting, "gateway": gateway},
                      "instances": list(instances),
                      "queues": {"prepare": {"depth": 1, "capacity": None,
                                             "oldest_age_s": None}}}}


def one(inst: dict[str, Any], reporting: bool = True, gateway: bool = False) -> Any:
    (view,) = build_pool_detail(detail(inst, reporting=reporting,
                                       gateway=gateway)).instances or ()
    return view


@pytest.mark.parametrize(("changes", "reporting", "liveness"), [
    ({}, True, "alive"),
    ({"alive": False}, True, "stale"),
    ({"alive": None}, True, None),  # the Proxy reports, but not this Instance's heartbeat
    ({"registered": False, "alive": None}, True, "unregistered"),
    # Without a Proxy exporter the exporter's scrapes decide, as in the pool's counts.
    ({"alive": None, "host_scraped": False}, False, "stale"),
    ({"alive": None, "host_scraped": True}, False, "alive"),
    ({"alive": True, "host_scraped": None}, False, None),
])
def test_liveness_comes_from_the_source_the_pool_counts_with(
        changes: dict[str, Any], reporting: bool, liveness: str | None) -> None:
    assert one(instance(**changes), reporting).liveness == liveness


def test_behind_a_gateway_an_exporter_row_is_judged_by_its_scrapes() -> None:
    # A gateway names its members as its endpoints: the Instance exporter's row has
    # another name, and is not "unregistered" for it.
    row = instance(registered=False, alive=None, host_scraped=True)
    assert one(row, gateway=True).liveness == "alive"
    assert one({**row, "host_scraped": False}, gateway=True).liveness == "stale"
    endpoint = instance(alive=False, host_scraped=None)
    assert one(endpoint, gateway=True).liveness == "stale"
    assert one(row).liveness == "unregistered"  # the embedded Proxy's registry


@pytest.mark.parametrize(("age", "resource"), [
    (2.0, "fresh"), (FRESH_S, "fresh"), (FRESH_S + 0.1, "missing"), (None, "missing"),
    (-1.0, "missing")])
def test_resource_data_is_fresh_up_to_the_threshold(age: float | None, resource: str) -> None:
    # The sample's own age, as the pool's with_resource count compares it: a sample
    # 12 s old scraped 4 s ago is fresh there, so it is here.
    view = one(instance(host_sample_age_s=age,
                        resource_freshness_s=None if age is None else age + 4))
    assert view.resource == resource


def test_load_is_the_proxys_inflight_else_the_engines_queue() -> None:
    proxy = one(instance())
    assert (proxy.load, proxy.load_source, proxy.load_ratio) == (2, "proxy", 0.25)
    engine = one(instance(proxy_inflight=None))
    assert (engine.load, engine.load_source, engine.load_ratio) == (4, "engine", 0.5)
    unknown = one(instance(proxy_inflight=None, engine={
        "source": None, "running": None, "waiting": 1, "kv_cache_usage_ratio": None}))
    assert (unknown.load, unknown.load_ratio) == (None, None)
    # No capacity, or a zero one: a load with nothing to measure it against.
    assert one(instance(capacity={"value": None, "source": None})).load_ratio is None
    assert one(instance(capacity={"value": 0, "source": "configured"})).load_ratio is None


def test_gpus_by_model_keep_unhealthy_apart_and_none_means_no_data() -> None:
    gpus = [{"gpu": "0", "gpu_uuid": "u0", "gpu_model": "A", "healthy": True,
             "util_percent": 50.0, "memory_used_ratio": 0.5},
            {"gpu": "1", "gpu_uuid": "u1", "gpu_model": "A", "healthy": False,
             "util_percent": None, "memory_used_ratio": None},
            {"gpu": "2", "gpu_uuid": "u2", "gpu_model": "B", "healthy": None,
             "util_percent": None, "memory_used_ratio": None}]
    view = one(instance(gpus=gpus))
    assert [(g.model, g.healthy, g.unhealthy) for g in view.gpu_models] == [
        ("A", 1, 1), ("B", 0, 0)]  # an ambiguous health counts in neither
    assert view.gpus[0].util_ratio == 0.5
    assert one(instance()).gpus is None


def test_failing_collectors_say_why() -> None:
    view = one(instance(collectors={
        "host": {"success": True, "reasons": [], "reasons_over": "lifetime"},
        "engine": {"success": False, "reasons": ["timeout", "connection"],
                   "reasons_over": "1m"},
        "gpu": {"success": None, "reasons": [], "reasons_over": "lifetime"}}))
    assert view.failing == ("engine: timeout",)


def test_unread_parts_stay_none_with_their_reason() -> None:
    doc = {**detail(instance()), "local": None, "local_error": "backend down"}
    view = build_pool_detail(doc)
    assert view.instances is None and view.instances_error == "backend down"
    assert view.queues == () and view.trend is None and view.trend_error == "canned"


@pytest.mark.parametrize("doc", [{}, {"proxy_id": "p"}, {**detail(), "trends": {"x": 1}}])
def test_a_document_that_is_not_a_drill_down_is_refused(doc: dict[str, Any]) -> None:
    with pytest.raises((KeyError, TypeError, ValueError)):
        build_pool_detail(doc)


@pytest.mark.parametrize("unicode", [True, False])
def test_a_sparkline_hatches_unknown_and_marks_a_measured_zero(unicode: bool) -> None:
    line = sparkline([0.0, 0.0, None, None, 1.0, 1.7], 6, unicode)
    hatch, low, high = ("\u2571", "▁", "█") if unicode else ("/", "_", "#")
    assert line == low * 2 + hatch * 2 + high * 2
    # Narrower than its slots: each mark is its slots' highest, so a peak survives.
    assert sparkline([0.0, 1.0, 0.0, 0.0], 2, unicode) == high + low


def test_no_label_or_backend_error_reaches_the_terminal_as_control_characters() -> None:
    evil = "\x1b[2J\x1b]0;owned\x07"
    gpus = [{"gpu": evil, "gpu_uuid": "u", "gpu_model": evil, "healthy": True,
             "util_percent": 10.0, "memory_used_ratio": 0.1}]
    doc = detail(instance(instance_id=evil, admission_state=evil, gpus=gpus, collectors={
        "engine": {"success": False, "reasons": [evil], "reasons_over": "1m"}}))
    doc["trends_error"] = evil
    text = render_pool_text(build_pool_detail(doc), Style(120, colour=False, unicode=True))
    assert "\x1b" not in text and "\x07" not in text
    assert text.count("\ufffd[2J") >= 5  # each one shown, defused
    failed = render_pool_text(build_pool_detail(
        {**doc, "local": None, "local_error": evil}), Style(120, colour=True, unicode=True))
    assert "\x1b[2J" not in failed and "\x07" not in failed
