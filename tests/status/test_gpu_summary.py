"""GPU capacity per model in the pool summary: from its rollups, null when unknown,
and a bad series nulls its value and is counted rather than guessed around."""

from __future__ import annotations

import pytest
from jsonschema import Draft202012Validator

from harness.canned_prometheus import Series, _selects, series
from poolscope.bridge.queries import snapshot_queries
from poolscope.bridge.schema import pool_summary_schema
from poolscope.bridge.summary import build_snapshot, parse_value
from poolscope.contract.fields import GPU_FIELDS, rollup_names
from tests.status.fleet import GIB, H100, blind_pool, busy_pool, gpu_series, summaries


def test_capacity_per_model_with_unhealthy_counted_apart() -> None:
    vector = [*busy_pool("p"), *gpu_series("p", "A10", "2", "0", None)]
    gpus = summaries(vector)["p"]["gpus"]
    assert gpus == {"A10": {"healthy": 2, "unhealthy": 0, "memory_total_bytes": None,
                            "used": None},
                    H100: {"healthy": 8, "unhealthy": 1, "memory_total_bytes": 640.0 * GIB,
                           "used": 3.5}}
    assert list(gpus) == sorted(gpus)


def test_no_gpu_series_is_null_never_an_empty_object() -> None:
    pool = summaries(blind_pool("p"))["p"]
    assert pool["gpus"] is None


def test_a_nan_count_lists_the_model_with_a_null() -> None:
    gpus = summaries(gpu_series("p", H100, "NaN", "0", None))["p"]["gpus"]
    assert gpus == {H100: {"healthy": None, "unhealthy": 0, "memory_total_bytes": None,
                           "used": None}}


@pytest.mark.parametrize(("used", "expected"), [("0.75", 0.75), ("0", 0.0), ("NaN", None),
                                                (None, None)])
def test_used_is_the_busy_gpu_equivalents_or_null(used: str | None,
                                                   expected: float | None) -> None:
    """A measured 0 is idle GPUs; no rollup (no healthy GPU) or a NaN is unknown, not 0."""
    gpus = summaries(gpu_series("p", H100, "2", "1", str(160 * GIB), used))["p"]["gpus"]
    assert gpus[H100]["used"] == expected
    assert gpus[H100]["healthy"] == 2 and gpus[H100]["unhealthy"] == 1


@pytest.mark.parametrize(("vector", "reason"), [
    # two series for one value: either would be a guess
    ([*gpu_series("p", H100, "8", "1", None), *gpu_series("p", H100, "7", None, None)],
     "duplicate_series"),
    (gpu_series("p", H100, "2.5", "1", None), "invalid_count"),
    (gpu_series("p", H100, "-1", "1", None), "invalid_count"),
])
def test_bad_series_null_the_value_and_are_counted(vector: list[Series], reason: str) -> None:
    snap = build_snapshot([(m, parse_value(v)) for m, v in vector], 1.0)
    assert snap.pools["p"]["gpus"][H100]["healthy"] is None
    assert snap.pools["p"]["gpus"][H100]["unhealthy"] == 1
    assert snap.rejected[reason] == 1


def test_a_third_duplicate_cannot_revive_a_conflict() -> None:
    vector = [*gpu_series("p", H100, "8", None, None) * 3]
    snap = build_snapshot([(m, parse_value(v)) for m, v in vector], 1.0)
    assert snap.pools["p"]["gpus"][H100]["healthy"] is None
    assert snap.rejected["duplicate_series"] == 2


def test_a_series_without_a_model_is_rejected_and_makes_no_entry() -> None:
    vector = [series("proxy_pool:gpus:count", "p", "8", "nvml", health="healthy"),
              series("proxy_pool:gpus:count", "p", "3", "nvml", health="sideways",
                     gpu_model=H100)]
    snap = build_snapshot([(m, parse_value(v)) for m, v in vector], 1.0)
    # The pool is known (a proxy_pool: series names it) but nothing of its GPUs is.
    assert snap.pools["p"]["gpus"] is None
    assert snap.rejected == {"no_gpu_model": 1}


def test_summaries_with_gpus_validate_against_the_schema() -> None:
    validator = Draft202012Validator(pool_summary_schema())
    for pool in summaries([*busy_pool(), *blind_pool()]).values():
        validator.validate(pool)
    entry = pool_summary_schema()["properties"]["gpus"]["additionalProperties"]
    assert entry["required"] == [f.key for f in GPU_FIELDS]


@pytest.mark.parametrize("shards", [1, 3])
def test_the_snapshot_query_reads_the_gpu_rollups_exactly_once(shards: int) -> None:
    rollups = {f.rollup for f in GPU_FIELDS}
    assert rollups <= rollup_names()
    for rollup in rollups:
        hits = [q for q in snapshot_queries(shards) if _selects(q, {"__name__": rollup})]
        assert len(hits) == 1, (rollup, hits)
