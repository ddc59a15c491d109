"""promtool, Prometheus' own reader and linter of the text format, accepts every
service's text page without a finding (the Python parsers' checks are in
`test_strict_parsers.py`)."""

from __future__ import annotations

import subprocess

import pytest

from harness.prometheus import binary
from tests.deploy.service_pages import PAGES, fetch, serving_page


def promtool_check_metrics(page: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([binary("promtool"), "check", "metrics"], input=page,
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("service", PAGES)
async def test_promtool_finds_nothing_on_the_text_page(service: str) -> None:
    async with serving_page(service) as client:
        _, _, page = await fetch(client)
    done = promtool_check_metrics(page)
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_promtool_would_report_a_lint_finding() -> None:
    """The check above can fail: a gauge named like a histogram's part is a finding."""
    page = "# HELP x_sum A gauge.\n# TYPE x_sum gauge\nx_sum 1\n"
    done = promtool_check_metrics(page)
    assert done.returncode != 0 and "x_sum" in done.stdout + done.stderr
