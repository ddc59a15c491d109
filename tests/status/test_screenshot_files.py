"""The screenshots docs/ shows: the fleet page, the pool page and the Prometheus console
in each state test_screenshots.py walks the demo cluster through, and the fleet page's
"What can I stop" over idle Instances (test_idle_real.py). They are taken there,
against the real stack; checked here without a browser, so `make unit` sees a missing or
resized one too."""

from __future__ import annotations

from itertools import product
from pathlib import Path

import pytest

from harness.prometheus import REPO
from tests.support.chromium import png_size

SCREENSHOTS = REPO / "docs" / "screenshots"
STATES = ("healthy", "stale", "missing")
# The pool page is wider: its Instances table's last column says what is failing.
WINDOWS = {"status": (1280, 720), "pool": (1440, 720), "console": (1280, 400)}
IDLE_SHOT = SCREENSHOTS / "status-what-can-i-stop.png"
IDLE_WINDOW = (1280, 900)


def screenshot(page: str, state: str) -> Path:
    return SCREENSHOTS / f"{page}-{state}.png"


@pytest.mark.parametrize(("page", "state"), list(product(WINDOWS, STATES)))
def test_the_screenshot_is_kept_in_docs(page: str, state: str) -> None:
    assert png_size(screenshot(page, state)) == WINDOWS[page]


def test_the_what_can_i_stop_screenshot_is_kept_in_docs() -> None:
    assert png_size(IDLE_SHOT) == IDLE_WINDOW
