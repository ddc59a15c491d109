"""The fleet console page, served by Prometheus itself from dashboards/consoles,
read as HTML and rendered by headless Chromium. Its screenshots are taken with the
status pages', in each state of tests/status/test_screenshots.py."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest

from dashboards import CONSOLE_PATH
from harness.prometheus import Prometheus
from poolscope.contract import catalog
from tests.dashboards.conftest import PROXY_IDS
from tests.dashboards.console_page import pool_rows
from tests.support.chromium import chromium

pytestmark = pytest.mark.integration

NO_DATA = "no data"
MEASURED_CELLS = ("load", "saturation", "qps", "queue", "instances", "quality", "admission")


def console_html(prom: Prometheus) -> str:
    with urllib.request.urlopen(f"{prom.url}{CONSOLE_PATH}", timeout=10) as r:
        return r.read().decode()


def test_every_pool_has_a_row_with_its_measured_values(prom: Prometheus) -> None:
    rows = pool_rows(console_html(prom))
    assert rows.keys() == PROXY_IDS
    for pool, cells in rows.items():
        assert all(cells[c] and NO_DATA not in cells[c] for c in MEASURED_CELLS), (pool, cells)
        assert cells["load"].endswith("%") and cells["qps"].endswith("/s")
        assert cells["instances"].startswith("2 / 2"), cells["instances"]


def test_an_absent_value_reads_no_data_never_zero(prom: Prometheus) -> None:
    # No GPU here, so proxy_pool:gpu_utilization:avg is absent for every pool.
    assert prom.query("proxy_pool:gpu_utilization:avg") == []
    for cells in pool_rows(console_html(prom)).values():
        assert cells["gpu"] == NO_DATA


def test_state_cells_show_the_rules_current_state(prom: Prometheus) -> None:
    quality = {s["metric"]["proxy_id"]: s["metric"]["quality"]
               for s in prom.query("proxy_pool:data_quality == 1")}
    rows = pool_rows(console_html(prom))
    assert {pool: cells["quality"] for pool, cells in rows.items()} == quality
    assert all(cells["admission"] in catalog.ADMISSION_STATES for cells in rows.values())


def test_console_renders_in_chromium(prom: Prometheus, tmp_path: Path) -> None:
    url = f"{prom.url}{CONSOLE_PATH}"
    rows = pool_rows(chromium(tmp_path, "--dump-dom", url))
    assert rows.keys() == PROXY_IDS
    assert all(cells["gpu"] == NO_DATA for cells in rows.values())
