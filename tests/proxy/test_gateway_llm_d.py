"""The llm-d router's endpoint picker: its page carries the `llm_d_epp_*` names and,
deprecated, GIE's names with the same values; the gateway adapter reads the newest
and never counts both (tests/fixtures/gateways/README.md gives the page's source
and sums)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from harness.gateway_pages import LLM_D, LLM_D_POOL, fixture_text, without_families
from poolscope.exporters.common.health import ErrorReason
from poolscope.exporters.proxy.gateways.pool import Pools
from tests.proxy.test_gateways import (
    assert_reading,
    fixture_truth,
    read,
    reading_error,
    revalue,
    samples_of,
    swap,
)

LLM_D_READY = f'llm_d_epp_ready_endpoints{{name="{LLM_D_POOL}"}} 3'
LLM_D_RUNNING = ('llm_d_epp_request_running{fairness_id="default-flow",model_name="food-review",'
                 'priority="0",target_model_name="food-review-1"} 8')
LLM_D_REQUESTS = ('llm_d_epp_request_total{fairness_id="default-flow",model_name="food-review",'
                  'priority="0",target_model_name="food-review-1"} 5210')
LLM_D_LAST_ENDPOINT = ('llm_d_epp_per_endpoint_queue_size{model_server_endpoint='
                       f'"{LLM_D_POOL}-7d9f5c6b8-klmno-rank-0",name="{LLM_D_POOL}"}} 5\n')
POOLS_BOTH_WAYS = pytest.mark.parametrize("pools", [Pools(label="name"), Pools(proxy_id="p1")],
                                          ids=["label", "id"])


@POOLS_BOTH_WAYS
def test_llm_d_page_gives_the_figures_of_either_generation_alone(pools: Pools) -> None:
    """The llm-d router publishes its llm_d_epp_* names and, deprecated, GIE's names
    with the same values: the page gives exactly what each generation gives alone,
    never their sum, and a page of its own names only (once the deprecated ones
    go) is read the same."""
    text = fixture_text(LLM_D)
    new_only = without_families(text, "inference_")
    assert not [n for n in samples_of(new_only) if n.startswith("inference_")]
    both = read("gie", text, pools)
    assert both == read("gie", new_only, pools) == read("gie", without_families(text, "llm_d_epp_"),
                                                         pools)
    [reading] = both.values()
    _, truth, requests = fixture_truth(LLM_D)
    assert_reading(reading, truth)
    assert (reading.registered, reading.alive, reading.inflight, reading.requests_total) == (
        3, 3, 25, requests)
    assert requests == 23642


def test_llm_d_names_are_read_before_their_deprecated_copies() -> None:
    """Where the generations disagree (they are sampled one after the other), the
    llm_d_epp_* figure is the one read, family by family."""
    text = fixture_text(LLM_D)
    for line, new in ((LLM_D_READY, "2"), (LLM_D_RUNNING, "6"), (LLM_D_REQUESTS, "5211")):
        text = revalue(line, new)(text)
    text = swap(text, LLM_D_LAST_ENDPOINT, "")
    reading = read("gie", text, Pools(label="name"))[LLM_D_POOL]
    assert (reading.registered, reading.alive, reading.inflight, reading.requests_total) == (
        2, 2, 23, 23643)
    assert set(reading.endpoints) == {f"{LLM_D_POOL}-7d9f5c6b8-abcde-rank-0",
                                      f"{LLM_D_POOL}-7d9f5c6b8-fghij-rank-0"}


LLM_D_MUTATIONS: list[tuple[str, Callable[[str], str], ErrorReason]] = [
    ("nan-running", revalue(LLM_D_RUNNING, "NaN"), ErrorReason.INVALID_VALUE),
    ("negative-ready", revalue(LLM_D_READY, "-1"), ErrorReason.INVALID_VALUE),
    ("inf-requests", revalue(LLM_D_REQUESTS, "+Inf"), ErrorReason.INVALID_VALUE),
    ("garbled", lambda t: swap(t, LLM_D_READY, LLM_D_READY.replace("{", "{{")), ErrorReason.PARSE),
    # Past the plausible ranges (exporters/common/plausible.py).
    ("absurd-ready", revalue(LLM_D_READY, "1e+12"), ErrorReason.INVALID_VALUE),
    ("fractional-ready", revalue(LLM_D_READY, "2.5"), ErrorReason.INVALID_VALUE),
    ("duplicate-ready", lambda t: swap(t, LLM_D_READY, f"{LLM_D_READY}\n{LLM_D_READY}"),
     ErrorReason.PARSE),
]


@pytest.mark.parametrize("generations", ["both", "new-only"])
@pytest.mark.parametrize(("mutate", "reason"), [(m, r) for _, m, r in LLM_D_MUTATIONS],
                         ids=[i for i, _, _ in LLM_D_MUTATIONS])
def test_bad_llm_d_pages_fail_with_a_reason(mutate: Callable[[str], str], reason: ErrorReason,
                                            generations: str) -> None:
    """A bad value in a family read fails the read: the deprecated copy beside it
    does not stand in for it."""
    text = fixture_text(LLM_D)
    if generations == "new-only":
        text = without_families(text, "inference_")
    assert reading_error("gie", mutate(text), Pools(label="name")).reason is reason


def test_a_page_of_neither_epp_generation_names_both_prefixes() -> None:
    err = reading_error("gie", fixture_text("llmgw"), Pools(label="name"))
    assert err.reason is ErrorReason.PARSE
    assert "llm_d_epp_*" in err.detail and "inference_*" in err.detail


def test_llm_d_bad_values_outside_the_families_read_do_not_fail_the_read() -> None:
    std_dev = f'llm_d_epp_std_dev_queue_size{{name="{LLM_D_POOL}"}} 2.52'
    text = swap(fixture_text(LLM_D), std_dev, std_dev.replace(" 2.52", " NaN"))
    assert read("gie", text, Pools(label="name"))[LLM_D_POOL].alive == 3


def test_a_bad_value_in_a_deprecated_copy_fails_the_read_too() -> None:
    """The two generations are one measurement: a page that breaks either is broken,
    rather than read by whichever half happens to look right."""
    old = 'inference_objective_running_requests{model_name="food-review"} 8'
    err = reading_error("gie", revalue(old, "NaN")(fixture_text(LLM_D)), Pools(label="name"))
    assert err.reason is ErrorReason.INVALID_VALUE
