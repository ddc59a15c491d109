"""bench.series_per_member at its smallest fleets (1 and 2 Instances, real processes): what
one more Instance costs on its Proxy's page, on its exporter's page and in Prometheus is
what the catalog predicts, and within docs/scaling.md's budget, so a family or a bucket
added per member fails here until the budget and its reasons are updated. Nothing here
times anything; the figures at 2 and 6 Instances are in docs/scaling.md.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import pytest

from bench.series_per_member import (
    ALERTS,
    INSTANCE_JOB,
    PROXY_JOB,
    RECORDS,
    SYNTHETIC,
    Settings,
    parse_args,
    run,
    table,
)
from poolscope.contract import catalog
from poolscope.exporters.proxy.histogram import REQUEST_DURATION_BUCKETS
from tests.support.flags import refused

pytestmark = pytest.mark.integration

# docs/scaling.md, "Cardinality per Instance and per GPU": the budget per member.
PROXY_SERIES_PER_MEMBER = 25
# An Instance exporter's page with 2 GPUs of one model, kept by the instance job: this
# many, plus 2 per network interface (receive and transmit).
INSTANCE_SERIES_BESIDE_INTERFACES = 65
GPUS = 2
# The label values a per-member family of the Proxy multiplies by.
VOCABULARY = {"outcome": len(catalog.OUTCOMES)}
BOUNDS = {catalog.PROXY_INSTANCE_REQUEST_DURATION.name: REQUEST_DURATION_BUCKETS}


def proxy_series_per_member() -> dict[str, int]:
    """Sample name -> series per member, from the catalog: a gauge one, a counter one
    per outcome, a histogram one per bound, +Inf, _sum and _count."""
    predicted = {}
    for family in catalog.all_families():
        if not family.name.startswith("poolscope_proxy_") or "instance_id" not in family.labels:
            continue
        sets = math.prod(VOCABULARY[label] for label in family.labels
                         if label not in catalog.INSTANCE_LABELS)
        if family.kind == "histogram":
            predicted[f"{family.name}_bucket"] = sets * (len(BOUNDS[family.name]) + 1)
            predicted[f"{family.name}_sum"] = predicted[f"{family.name}_count"] = sets
        else:
            predicted[family.name] = sets
    return predicted


# Two stacks side by side, their exact series counted: with the two cores to itself, so no
# engine read times out under load (`make test` runs `alone` tests last).
@pytest.mark.alone
def test_one_more_instance_costs_what_the_catalog_says(tmp_path: Path) -> None:
    result = run(Settings(sizes=(1, 2), gpus=GPUS, interval_s=1.0, timeout_s=240.0), tmp_path)
    small, large = result.sizes
    predicted = proxy_series_per_member()
    assert sum(predicted.values()) == PROXY_SERIES_PER_MEMBER

    # The Proxy's page: each member its catalog families, nothing more.
    assert result.per_member(lambda m: m.proxy_page) == PROXY_SERIES_PER_MEMBER
    assert {name: Fraction(n, large.size)
            for name, n in large.proxy_member_families.items()} == predicted
    # One Instance exporter's page: the filter drops its process_* series and nothing else.
    assert all(m.exporter_page - m.exporter_kept == 6 for m in result.sizes)
    dropped = {n for n in large.exporter_families if not n.startswith("poolscope_")}
    assert dropped and all(n.startswith("process_") for n in dropped), dropped
    interfaces = large.exporter_families[catalog.HOST_NETWORK_RECEIVE.name]
    assert large.exporter_kept == INSTANCE_SERIES_BESIDE_INTERFACES + 2 * interfaces
    assert sum(n for name, n in large.exporter_families.items()
               if name.startswith("poolscope_gpu_") and name != catalog.GPU_DEVICES.name) \
        == 6 * GPUS

    # Prometheus: the two jobs' series of the member, up and scrape_* on its exporter, no
    # rule record or alert per Instance; every head series accounted for.
    def stored(group: str) -> Fraction:
        return result.per_member(lambda m: m.stored.get(group, 0))

    assert stored(PROXY_JOB) == PROXY_SERIES_PER_MEMBER
    assert stored(INSTANCE_JOB) == large.exporter_kept + len(SYNTHETIC)
    assert stored(RECORDS) == 0 and stored(ALERTS) == 0
    assert all(m.unaccounted == 0 for m in result.sizes), [m.ended for m in result.sizes]
    assert result.per_member(lambda m: sum(m.stored.values())) == \
        PROXY_SERIES_PER_MEMBER + large.exporter_kept + len(SYNTHETIC)
    assert small.stored[RECORDS] > 0  # the rules ran

    shown = table(result)
    assert "per Instance added" in shown and "Prometheus head series" in shown


@pytest.mark.parametrize(("argv", "flag"), [
    (["--sizes", "2"], "--sizes"), (["--sizes", "6,2"], "--sizes"),
    (["--sizes", "2,2"], "--sizes"), (["--sizes", "0,2"], "--sizes"),
    (["--gpus", "-1"], "--gpus"), (["--interval", "0"], "--interval"),
    (["--timeout", "nan"], "--timeout")])
def test_a_bad_flag_exits_2_naming_it(argv: list[str], flag: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert f"argument {flag}" in refused(parse_args, argv, capsys)
