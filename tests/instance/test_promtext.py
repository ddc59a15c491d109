"""The strict picker under the engine reader: label sets, escapes, what counts as a sample."""

from __future__ import annotations

import pytest

from poolscope.exporters.common.promtext import PromTextError, prefixes_on_page, select


def test_label_values_are_unescaped_and_sorted_by_name() -> None:
    page = ('# HELP m a metric\n'
            'm{z="1",a="say \\"hi\\", a\\\\b\\nc}"} 2\n'
            'm_bucket{le="1"} 9\n'
            'm 3 1700000000000\n')
    assert select(page, ["m"]) == {"m": [((("a", 'say "hi", a\\b\nc}'), ("z", "1")), 2.0),
                                         ((), 3.0)]}


def test_a_name_is_not_the_start_of_a_longer_name() -> None:
    page = "vllm:num_requests_running_total 5\nvllm:num_requests_running 2\n"
    assert select(page, ["vllm:num_requests_running"]) == {
        "vllm:num_requests_running": [((), 2.0)]}


@pytest.mark.parametrize("page", [
    "m{a=\"1\"} 1\nm{a=\"1\"} 2\n",   # the same series twice
    "m\n",                              # a wanted name without a value
    "m{a=\"1\"",                        # cut off at the end of the page
    "m{a=\"1\"b=\"2\"} 1\n",            # pairs without a comma
    "m{a=\"1\",a=\"2\"} 1\n",           # one label name twice
    # Thousands of comma-less pairs ending in junk: refused at once (this form once
    # backtracked exponentially, stalling the exporter's event loop).
    "m{" + 'a="x" ' * 3000 + "!} 1\n",
])
def test_broken_or_repeated_samples_are_errors(page: str) -> None:
    with pytest.raises(PromTextError):
        select(page, ["m"])


def test_prefixes_count_only_at_the_start_of_a_line() -> None:
    page = "# HELP vllm:x help\nsglang_y 1\n"
    assert prefixes_on_page(page, ("vllm:", "sglang_", "# HELP")) == {"sglang_", "# HELP"}
