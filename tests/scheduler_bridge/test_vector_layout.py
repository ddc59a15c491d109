"""Reading an answer against the last one's layout: only "the same series, other values
and time" may reuse the parsed label sets, and what it reads is what a full parse reads,
whatever the label values hold (quotes, backslashes, the very text the layout cuts at)."""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from poolscope.bridge.vector_layout import Layout

Rows = Sequence[tuple[dict[str, str], str]]
T1, T2 = 1_700_000_000.5, 1_700_000_007.25


def answer(rows: Rows, at: float | Sequence[float] = T1, **extra: Any) -> bytes:
    """An instant vector the way Prometheus writes one: compact, keys in this order."""
    times = [at] * len(rows) if isinstance(at, float) else at
    return orjson.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": m, "value": [t, v]} for (m, v), t in zip(rows, times, strict=True)]},
        **extra})


def full_parse(body: bytes) -> tuple[list[dict[str, str]], list[float]]:
    result = orjson.loads(body)["data"]["result"]
    return [s["metric"] for s in result], [float(s["value"][1]) for s in result]


def same(a: Sequence[float], b: Sequence[float]) -> bool:
    return len(a) == len(b) and all(x == y or (math.isnan(x) and math.isnan(y))
                                    for x, y in zip(a, b, strict=True))


def pools(n: int, value: str = "1") -> list[tuple[dict[str, str], str]]:
    return [({"__name__": f"proxy_pool:f{i % 3}", "proxy_id": f"p{i}", "source": "psutil"},
             value) for i in range(n)]


def layout_of(body: bytes) -> Layout:
    layout = Layout.cut(body, full_parse(body)[0])
    assert layout is not None
    return layout


def test_the_same_series_with_other_values_and_time_reuse_the_label_sets() -> None:
    layout = layout_of(answer(pools(5)))
    rows = [(m, v) for (m, _), v in zip(pools(5), ["0", "NaN", "+Inf", "-0", "1e-07"],
                                         strict=True)]
    body = answer(rows, T2)
    values = layout.values_of(body)
    assert isinstance(values, array)
    labels, expected = full_parse(body)
    assert values is not None and same(values, expected)
    assert list(layout.labels) == labels
    assert math.copysign(1.0, values[3]) == -1.0  # "-0" keeps its sign, as float() does


@pytest.mark.parametrize("strings", [["-0", "1", "0.5"], ["1e+21", "3", "0"], ["NaN", "2", "2"],
                                     ["-Inf", "1", "+Inf"], ["123456789012345678", "0", "7"]])
def test_each_value_is_the_double_float_reads(strings: list[str]) -> None:
    layout = layout_of(answer(pools(3)))
    values = layout.values_of(answer([(m, v) for (m, _), v in zip(pools(3), strings,
                                                                    strict=True)], T2))
    assert values is not None and same(values, [float(v) for v in strings])
    assert [math.copysign(1.0, v) for v in values] == [
        math.copysign(1.0, float(v)) for v in strings]  # "-0" keeps its sign


def _renamed(rows: list[tuple[dict[str, str], str]]) -> None:
    rows[2][0]["source"] = "nvml"


def _added(rows: list[tuple[dict[str, str], str]]) -> None:
    rows.append(({"__name__": "proxy_pool:f0", "proxy_id": "p9"}, "1"))


def _removed(rows: list[tuple[dict[str, str], str]]) -> None:
    del rows[1]


def _swapped(rows: list[tuple[dict[str, str], str]]) -> None:
    rows[0], rows[1] = rows[1], rows[0]


def _new_label(rows: list[tuple[dict[str, str], str]]) -> None:
    rows[4][0]["gpu_model"] = "H100"


@pytest.mark.parametrize("change", [_renamed, _added, _removed, _swapped, _new_label])
def test_any_other_series_is_not_read_through_the_layout(change: Any) -> None:
    layout = layout_of(answer(pools(5)))
    rows = pools(5, "2")
    change(rows)
    assert layout.values_of(answer(rows, T2)) is None


@pytest.mark.parametrize("body", [
    answer(pools(5), T2, warnings=["too many samples"]),
    answer(pools(5), [T2, T2, T1, T2, T2]),  # one series at another time
    answer(pools(5), T2).replace(b'"1"]', b'"1\\"]', 1),  # a value string with a quote
    answer(pools(4), T2),
    b"",
], ids=["warning", "two-times", "escaped", "shorter", "empty"])
def test_an_answer_with_more_or_other_text_is_not_read_through_the_layout(
        body: bytes) -> None:
    assert layout_of(answer(pools(5))).values_of(body) is None


def test_a_value_float_refuses_is_left_to_the_full_parse() -> None:
    layout = layout_of(answer(pools(3)))
    assert layout.values_of(answer([(m, "one") for m, _ in pools(3)], T2)) is None


def test_no_layout_without_series() -> None:
    assert Layout.cut(answer([]), []) is None
    assert Layout.cut(answer(pools(2)), full_parse(answer(pools(3)))[0]) is None


# Label values built from the very pieces the layout cuts at and JSON escapes.
_TRICKY = st.lists(st.sampled_from(['"', "\\", ',"value":[', '"]},{"metric":', "]}", "{",
                                    "p", "é", "\n", ",", ":"]), max_size=6).map("".join)
_VALUES = st.sampled_from(["0", "1", "3", "0.25", "-0", "NaN", "+Inf", "-Inf", "1e+21",
                           "1e-07", "123456789012345678"])
_ROWS = st.lists(st.tuples(st.fixed_dictionaries({"__name__": st.sampled_from(["a", "b"]),
                                                  "proxy_id": _TRICKY, "source": _TRICKY}),
                           _VALUES), min_size=1, max_size=12)


@given(_ROWS, st.data())
def test_what_a_layout_reads_is_what_a_full_parse_reads(rows: Rows, data: st.DataObject
                                                        ) -> None:
    layout = layout_of(answer(rows))
    others = [(m, data.draw(_VALUES)) for m, _ in rows]
    body = answer(others, T2)
    values = layout.values_of(body)
    assert values is not None
    assert same(values, full_parse(body)[1])


@given(_ROWS, _ROWS)
def test_other_label_sets_are_never_read_as_the_layout_s(first: Rows, second: Rows) -> None:
    layout = layout_of(answer(first))
    if layout.values_of(answer(second, T2)) is not None:
        assert [m for m, _ in second] == list(layout.labels)
