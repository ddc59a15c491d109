"""The summary as a pure function of proxy_pool: samples (no HTTP)."""

from __future__ import annotations

import math

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from harness.canned_prometheus import Series, pool_series, series
from poolscope.bridge.schema import pool_summary_schema
from poolscope.bridge.summary import (
    Sample,
    Vector,
    build_snapshot,
    build_summaries,
    encode_json,
    parse_value,
)
from poolscope.contract.fields import (
    DATA_QUALITY_LABEL,
    DATA_QUALITY_ROLLUP,
    FIELDS,
    METRIC_SOURCE_FIELDS,
    Kind,
)
from poolscope.scheduler_bridge.client import parse_pool

T = 1_700_000_000.123


def samples(vector: list[Series]) -> list[Sample]:
    return [(metric, parse_value(value)) for metric, value in vector]


def get(summary: dict, path: str) -> object:
    section, key = path.split(".", 1)
    return summary[section][key]


def without(vector: list[Series], rollup: str) -> list[Series]:
    return [s for s in vector if s[0]["__name__"] != rollup]


def test_complete_pool_has_every_field_and_the_evaluation_time() -> None:
    pool = build_summaries(samples(pool_series("p1", value="2")), T)["p1"]
    assert pool["schema_version"] == 1
    assert pool["proxy_id"] == "p1"
    assert pool["generated_at"] == T
    for f in FIELDS:
        expected = "accepting" if f.kind is Kind.STATE else 2 * f.scale
        assert get(pool, f.path) == pytest.approx(expected), f.path
    assert pool["health"]["data_quality"] == "complete"
    assert pool["metric_quality"] == {"resource": "complete", "load": "complete",
                                      "queue": "complete"}
    assert pool["metric_source"] == dict.fromkeys(METRIC_SOURCE_FIELDS, "test")


def test_absent_rollup_is_null_and_degrades_quality() -> None:
    vector = without(pool_series("p1"), "proxy_pool:requests:rate1m")
    pool = build_summaries(samples(vector), T)["p1"]
    assert pool["load"]["qps_1m_total"] is None
    assert pool["metric_source"]["qps_1m"] == "unknown"
    assert pool["metric_quality"]["load"] == "partial"
    assert pool["metric_quality"]["resource"] == "complete"
    # The rules said "complete"; a null field makes it partial regardless.
    assert pool["health"]["data_quality"] == "partial"


@pytest.mark.parametrize("text", ["NaN", "+Inf", "-Inf"])
def test_non_finite_values_are_null_not_zero(text: str) -> None:
    vector = [*without(pool_series("p1"), "proxy_pool:cpu_utilization:avg"),
              series("proxy_pool:cpu_utilization:avg", "p1", text, "psutil")]
    snapshot = build_snapshot(samples(vector), T)
    pool = snapshot.pools["p1"]
    assert pool["utilization"]["cpu_avg"] is None
    assert pool["health"]["data_quality"] == "partial"
    # The series exists (wired) even though it holds no measurement.
    reading = snapshot.readings["p1"]["utilization.cpu_avg"]
    assert reading.present and reading.source == "psutil"


def test_measured_zero_stays_zero_and_counts_are_ints() -> None:
    pool = build_summaries(samples(pool_series("p1", value="0")), T)["p1"]
    assert pool["load"]["inflight_total"] == 0
    assert pool["instances"]["total"] == 0
    assert type(pool["instances"]["total"]) is int
    assert pool["health"]["data_quality"] == "complete"


def test_scale_turns_base_units_into_schema_units() -> None:
    vector = [series("proxy_pool:cpu_utilization:avg", "p1", "0.425"),
              series("proxy_pool:network_receive_bytes:rate1m", "p1", "1000000"),
              series("proxy_pool:memory_used:ratio", "p1", "0.46")]
    util = build_summaries(samples(vector), T)["p1"]["utilization"]
    assert util["cpu_avg"] == pytest.approx(42.5)
    assert util["network_rx_mbps_total"] == pytest.approx(8.0)
    assert util["memory_used_ratio"] == 0.46


SAMPLED_AT = "1800000000.125"  # a scrape's timestamp as Prometheus writes it (unix s, ms)
SAMPLED = "proxy_pool:inflight_requests:timestamp"


def test_inflight_sampled_at_is_the_scrape_time_unrounded_and_in_declared_order() -> None:
    """A unix time is a number like any other: not a count, not scaled, not rounded, and
    `load`'s fields keep the order they were declared in (schema_version 1: a field is
    appended, the fields before it keep their order)."""
    vector = [*without(pool_series("p1", value="2", source="proxy_dispatch"), SAMPLED),
              series(SAMPLED, "p1", SAMPLED_AT, "proxy_dispatch")]
    for built in (samples(vector),
                  Vector([m for m, _ in vector], [float(v) for _, v in vector])):
        snapshot = build_snapshot(built, T)
        load = snapshot.pools["p1"]["load"]
        assert load["inflight_sampled_at"] == 1_800_000_000.125
        assert type(load["inflight_sampled_at"]) is float
        # In the order the fields are declared: a field added after it comes after it.
        assert list(load) == [f.path.removeprefix("load.") for f in FIELDS
                              if f.path.startswith("load.")]
        assert snapshot.readings["p1"]["load.inflight_sampled_at"].source == "proxy_dispatch"
        assert snapshot.rejected == {}
    served = orjson.loads(encode_json(snapshot.pools))["p1"]
    Draft202012Validator(pool_summary_schema()).validate(served)
    assert served["load"]["inflight_sampled_at"] == 1_800_000_000.125
    pool = parse_pool(served)
    assert pool.load.inflight_sampled_at == 1_800_000_000.125
    assert pool.load.inflight_total == 2


def test_without_inflight_sampled_at_the_load_group_stays_complete() -> None:
    """It times inflight_total rather than measuring load, so it is in no quality group:
    its null makes data_quality partial (every field counts there), not the load group.
    The rules never serve one without the other (its rule's `and`)."""
    pool = build_summaries(samples(without(pool_series("p1"), SAMPLED)), T)["p1"]
    assert pool["load"]["inflight_sampled_at"] is None
    assert pool["metric_quality"]["load"] == "complete"
    assert pool["health"]["data_quality"] == "partial"


def test_queue_depths_are_told_apart_by_their_queue_label() -> None:
    vector = [series("proxy_pool:queue_depth:sum", "p1", "3", "proxy_queue", queue="prepare"),
              series("proxy_pool:queue_depth:sum", "p1", "0", "proxy_queue", queue="ready"),
              series("proxy_pool:queue_depth:sum", "p1", "9", "proxy_queue", queue="other")]
    pool = build_summaries(samples(vector), T)["p1"]
    assert pool["load"]["prepare_queue_depth"] == 3
    assert pool["load"]["ready_queue_depth"] == 0
    assert pool["metric_source"]["queue_depth"] == "proxy_queue"


def test_admission_state_is_the_one_hot_label() -> None:
    vector = [series("proxy_pool:admission_state", "p1", "0", state="accepting"),
              series("proxy_pool:admission_state", "p1", "1", state="draining")]
    pool = build_summaries(samples(vector), T)["p1"]
    assert pool["health"]["pool_admission_state"] == "draining"


def test_two_hot_states_are_a_conflict_not_a_pick() -> None:
    vector = [series("proxy_pool:admission_state", "p1", "1", state="accepting"),
              series("proxy_pool:admission_state", "p1", "1", state="draining")]
    snapshot = build_snapshot(samples(vector), T)
    assert snapshot.pools["p1"]["health"]["pool_admission_state"] is None
    assert snapshot.rejected["ambiguous_state"] == 1


def test_duplicate_series_for_one_field_make_it_null() -> None:
    vector = [series("proxy_pool:inflight_requests:sum", "p1", "3", instance="a"),
              series("proxy_pool:inflight_requests:sum", "p1", "4", instance="b")]
    snapshot = build_snapshot(samples(vector), T)
    assert snapshot.pools["p1"]["load"]["inflight_total"] is None
    assert snapshot.rejected["duplicate_series"] == 1


@pytest.mark.parametrize("value", ["2.5", "-1", "1e300"])
def test_a_count_that_is_not_a_count_is_null(value: str) -> None:
    snapshot = build_snapshot(samples([series("proxy_pool:instances:count", "p1", value)]), T)
    assert snapshot.pools["p1"]["instances"]["total"] is None
    assert snapshot.rejected["invalid_count"] == 1


def test_rules_verdict_wins_when_worse() -> None:
    pool = build_summaries(samples(pool_series("p1", quality="missing")), T)["p1"]
    assert pool["health"]["data_quality"] == "missing"


def test_unknown_quality_from_the_rules_is_rejected_not_served() -> None:
    vector = [*without(pool_series("p1"), DATA_QUALITY_ROLLUP),
              series(DATA_QUALITY_ROLLUP, "p1", "1", **{DATA_QUALITY_LABEL: "excellent"})]
    snapshot = build_snapshot(samples(vector), T)
    assert snapshot.pools["p1"]["health"]["data_quality"] == "complete"
    assert snapshot.rejected["unknown_state"] == 1


def test_pool_known_only_by_a_data_quality_series_is_missing() -> None:
    vector = [series(DATA_QUALITY_ROLLUP, "p2", "1", **{DATA_QUALITY_LABEL: "complete"})]
    pool = build_summaries(samples(vector), T)["p2"]
    assert pool["health"]["data_quality"] == "missing"
    assert pool["metric_quality"] == dict.fromkeys(("resource", "load", "queue"), "missing")
    assert pool["metric_source"] == dict.fromkeys(METRIC_SOURCE_FIELDS, "unknown")
    assert all(v is None for v in pool["load"].values())


def test_pools_are_every_proxy_id_and_unlabelled_series_are_rejected() -> None:
    vector = [*pool_series("a"), series("proxy_pool:some_future_rollup", "b", "1"),
              series("proxy_pool:inflight_requests:sum", None, "5"),
              series("up", "c", "1")]
    snapshot = build_snapshot(samples(vector), T)
    assert sorted(snapshot.pools) == ["a", "b"]
    assert snapshot.rejected == {"no_proxy_id": 1, "not_a_rollup": 1}


@given(st.dictionaries(st.sampled_from([f.path for f in FIELDS]),
                       st.sampled_from(["0", "1", "NaN", "0.5"])),
       st.sampled_from(["complete", "partial", "missing", None]))
def test_data_quality_is_never_complete_with_a_null(present: dict[str, str],
                                                    rule: str | None) -> None:
    by_path = {f.path: f for f in FIELDS}
    vector = [series(by_path[p].rollup, "p", "1" if by_path[p].kind is Kind.STATE else v,
                     **({by_path[p].state_label: "accepting"} if by_path[p].kind is Kind.STATE
                        else by_path[p].matchers))
              for p, v in present.items()]
    if rule is not None:
        vector.append(series(DATA_QUALITY_ROLLUP, "p", "1", **{DATA_QUALITY_LABEL: rule}))
    pools = build_summaries(samples(vector), T)
    if not vector:
        assert pools == {}
        return
    pool = pools["p"]
    values = [get(pool, f.path) for f in FIELDS]
    quality = pool["health"]["data_quality"]
    if any(v is None for v in values):
        assert quality != "complete"
    if all(v is None for v in values):
        assert quality == "missing"
    if rule is not None:
        order = ["complete", "partial", "missing"]
        assert order.index(quality) >= order.index(rule)


def test_a_vector_is_a_sequence_of_samples_with_non_finite_values_as_none() -> None:
    labels = [{"proxy_id": str(i)} for i in range(3)]
    vector = Vector(labels, [1.5, math.nan, -math.inf])
    assert len(vector) == 3
    assert list(vector) == [(labels[0], 1.5), (labels[1], None), (labels[2], None)]
    assert vector[-1] == (labels[2], None)
    assert list(vector[1:]) == [(labels[1], None), (labels[2], None)]
    with pytest.raises(ValueError):
        Vector(labels, [1.0])


_ROLLUPS = sorted({f.rollup for f in FIELDS} | {DATA_QUALITY_ROLLUP, "proxy_pool:future",
                                                "up"})


@given(st.lists(st.tuples(st.sampled_from(_ROLLUPS), st.sampled_from(["a", "b", None]),
                          st.sampled_from(["0", "1", "3", "2.5", "-1", "NaN", "+Inf", "-Inf"]),
                          st.sampled_from(["accepting", "draining", "prepare", "ready",
                                           "complete", "missing", "excellent"]),
                          st.sampled_from(["psutil", None])), max_size=40))
def test_a_vector_builds_the_snapshot_its_samples_build(
        rows: list[tuple[str, str | None, str, str, str | None]]) -> None:
    """The parsed-response fast path and the Sample path cannot drift apart."""
    vector = [series(name, pid, value, source, state=label, queue=label, quality=label)
              for name, pid, value, label, source in rows]
    fast = build_snapshot(Vector([m for m, _ in vector], [float(v) for _, v in vector]), T)
    slow = build_snapshot(samples(vector), T)
    assert fast.pools == slow.pools
    assert fast.rejected == slow.rejected
    assert fast.series == slow.series == len(rows)
    assert fast.readings == slow.readings


def test_encoding_writes_non_finite_numbers_as_null_never_as_a_number() -> None:
    assert encode_json({"a": math.nan, "b": math.inf, "c": 0.0, "d": "ü"}) == (
        '{"a":null,"b":null,"c":0.0,"d":"ü"}'.encode())
    assert encode_json({1: [None], "e": (1, 2)}) == b'{"1":[null],"e":[1,2]}'
