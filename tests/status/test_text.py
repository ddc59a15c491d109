"""The terminal screen: bars that cannot pass an unknown off as 0, width, colour."""

from __future__ import annotations

import re

import pytest

from poolscope.scheduler_bridge.status.model import GpuModelView
from poolscope.scheduler_bridge.status.text import HATCH, Style, bar, capacity_bar, render_text
from tests.status.fleet import H100, blind_pool, busy_pool
from tests.status.test_view import view_of

PLAIN = Style(width=120, colour=False, unicode=True)
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def lines_of(text: str, start: str) -> list[str]:
    """A pool's lines: in the pool table, then in the GPU table."""
    return [line for line in text.splitlines() if line.startswith(start)]


def line_of(text: str, start: str) -> str:
    return lines_of(text, start)[0]


@pytest.mark.parametrize("unicode", [True, False])
def test_an_unknown_bar_is_not_an_empty_one(unicode: bool) -> None:
    unknown, zero = bar(None, 10, unicode=unicode), bar(0.0, 10, unicode=unicode)
    assert len(unknown) == len(zero) == 10
    assert not set(unknown) & set(zero)


@pytest.mark.parametrize(("ratio", "expected"), [
    (0.0, "░░░░░░░░"), (0.5, "████░░░░"), (0.0625, "▌░░░░░░░"), (1.0, "████████"),
    (1.7, "████████"),  # an overloaded pool fills the bar; its figure says how much
])
def test_bar_fill(ratio: float, expected: str) -> None:
    assert bar(ratio, 8) == expected


def test_a_pool_line_shows_its_bars_counts_and_states() -> None:
    text = render_text(view_of([*busy_pool("busy"), *blind_pool("blind")]), PLAIN)
    busy = line_of(text, "busy ")
    assert "62%" in busy and "35%" in busy and "accepting" in busy
    # alive 4, stale 1, asleep unknown (the canned pool has no such rollup), missing 0 ...
    assert re.search(r"%\s+4\s+1\s+\?\s+0\s+1\s+2\s+partial\s+accepting$", busy)
    blind = line_of(text, "blind ")
    assert "%" not in blind and HATCH in blind and "░" not in blind
    assert re.search(r"\?\s+.*\?", blind)
    assert "IDLE?" in text and "unknown, not idle" in text


def test_gpus_show_capacity_with_unhealthy_apart() -> None:
    text = render_text(view_of([*busy_pool("busy"), *blind_pool("blind")]), PLAIN)
    _, gpu_line = lines_of(text, "busy ")
    assert "42%" in gpu_line and "30%" in gpu_line
    assert re.search(rf"{re.escape(H100)}\s+8\s+1\s+3\.5\s+4\.5\s+640 GiB$", gpu_line)
    assert lines_of(text, "blind ")[1].endswith("no GPU data")
    # The fleet per model: total 9 = 3.5 used + 4.5 free + 1 unhealthy, in neither.
    fleet = line_of(text, H100)
    assert re.search(r"\s9\s+3\.5\s+4\.5\s+1\s+640 GiB$", fleet), fleet
    capacity = fleet.removeprefix(H100).split()[0]
    assert capacity.startswith("█") and "░" in capacity and capacity.endswith("\u2573")
    assert HATCH not in capacity


@pytest.mark.parametrize("unicode", [True, False])
def test_the_capacity_bar_splits_used_free_and_unhealthy(unicode: bool) -> None:
    used, free, sick = ("█", "░", "\u2573") if unicode else ("#", "-", "x")
    assert capacity_bar(GpuModelView("m", 3, 1, None, 1.0), 8, unicode) == (
        used * 2 + free * 4 + sick * 2)
    # Use unknown: the healthy part is hatched, never drawn as free.
    hatch = HATCH if unicode else "/"
    assert capacity_bar(GpuModelView("m", 3, 1, None, None), 8, unicode) == hatch * 6 + sick * 2
    assert capacity_bar(GpuModelView("m", None, 1, None, 1.0), 8, unicode) == hatch * 8


def test_without_any_gpu_data_one_line_says_so() -> None:
    text = render_text(view_of(blind_pool("blind")), PLAIN)
    assert "GPUs: no pool has GPU data" in text and "CAPACITY" not in text


def test_bars_follow_the_terminal_width() -> None:
    view = view_of(busy_pool("busy"))
    narrow = line_of(render_text(view, Style(90, False, True)), "busy ")
    wide = line_of(render_text(view, Style(160, False, True)), "busy ")
    assert len(narrow) <= 90 < len(wide) <= 160


def test_colour_only_when_asked_and_labels_cannot_carry_escapes() -> None:
    vector = busy_pool("evil\x1b[2J\x1b[31m")
    plain = render_text(view_of(vector), PLAIN)
    assert "\x1b" not in plain and "evil\ufffd[2J" in plain
    coloured = render_text(view_of(vector), Style(120, True, True))
    assert ANSI.search(coloured) and ANSI.sub("", coloured) == plain


def test_ascii_output_when_the_encoding_has_no_blocks() -> None:
    text = render_text(view_of([*busy_pool("busy"), *blind_pool("blind")]),
                       Style(120, False, False))
    text.encode("ascii")
    assert "///" in line_of(text, "blind ")


def test_a_stale_snapshot_says_so_first() -> None:
    text = render_text(view_of(busy_pool("p"), stale=True), PLAIN)
    assert text.splitlines()[1].startswith("STALE:")
