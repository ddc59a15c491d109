"""/status as a browser renders it: headless Chromium against the bridge in this process.
Set POOLSCOPE_UPDATE_SCREENSHOTS=1 to refresh docs/screenshots/status.png."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

from tests.scheduler_bridge.canned import Series
from tests.status.conftest import MakeBridge
from tests.status.fleet import (
    GIB,
    HOSTILE_MODEL,
    HOSTILE_POOL,
    blind_pool,
    busy_pool,
    field_series,
    gpu_series,
    hostile_pool,
)
from tests.status.test_page import Elements
from tests.support.chromium import chromium, png_size
from tests.support.prometheus import REPO

SCREENSHOT = REPO / "docs" / "screenshots" / "status.png"
WINDOW = (1280, 560)


def saturated_pool(proxy_id: str = "decode-a10") -> list[Series]:
    values = {"instances.total": "3", "instances.alive": "3", "instances.stale": "0",
              "instances.missing_resource": "1", "instances.idle": "0",
              "instances.idle_unknown": "0", "load.load_ratio": "1.12",
              "load.saturation": "0.93", "utilization.gpu_util_avg": "0.97",
              "health.pool_admission_state": "saturated"}
    return [*(field_series(proxy_id, p, v) for p, v in values.items()),
            *gpu_series(proxy_id, "NVIDIA A10", "5", "1", str(5 * 24 * GIB))]


async def test_the_page_renders_with_every_pool_and_no_injected_markup(
        make_bridge: MakeBridge, tmp_path: Path) -> None:
    bridge = await make_bridge([*busy_pool("busy"), *blind_pool("blind"), *hostile_pool()])
    dom = Elements(await asyncio.to_thread(chromium, tmp_path, "--dump-dom",
                                           f"{bridge.url}/status"))
    pools = [a["data-pool"] for tag, a in dom.tags if tag == "tr" and "data-pool" in a]
    assert set(pools) == {"busy", "blind", HOSTILE_POOL}
    assert [tag for tag, _ in dom.tags if tag in ("script", "img", "iframe")] == []
    assert HOSTILE_POOL in dom.text and HOSTILE_MODEL in dom.text


async def test_screenshot(make_bridge: MakeBridge, tmp_path: Path) -> None:
    bridge = await make_bridge([*busy_pool("prefill-h100"), *saturated_pool(),
                                *blind_pool("batch-cpu")])
    shot = tmp_path / "status.png"
    await asyncio.to_thread(chromium, tmp_path, f"--window-size={WINDOW[0]},{WINDOW[1]}",
                            f"--screenshot={shot}", f"{bridge.url}/status")
    assert png_size(shot) == WINDOW
    if os.environ.get("POOLSCOPE_UPDATE_SCREENSHOTS") == "1":
        shutil.copyfile(shot, SCREENSHOT)


def test_the_screenshot_is_kept_in_docs() -> None:
    assert png_size(SCREENSHOT) == WINDOW
