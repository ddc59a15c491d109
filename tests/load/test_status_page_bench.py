"""bench.status_page measures what it says: its fleet's trends are read whole and its
two pages differ by one chart per pool. Nothing here times anything."""

from __future__ import annotations

import pytest

from bench.status_page import main, measure


async def test_the_bench_reads_every_pool_and_draws_its_chart() -> None:
    rows = {name: (ms, size) for name, ms, size in await measure(pools=5, rounds=2)}
    assert set(rows) == {"snapshot", "trends", "page", "page+trends, first in a step",
                         "page+trends, again in the step"}
    assert all(ms > 0 for ms, _ in rows.values())
    plain, charted = rows["page"][1], rows["page+trends, first in a step"][1]
    assert plain is not None and charted is not None and charted > plain


def test_the_table_names_its_anchor(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--pools", "3", "--rounds", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "3 pools, median of 1 rounds, one window"
    assert out[3].startswith("| snapshot |") and "| 1.00 |" in out[3]
