"""/status as a browser renders it: headless Chromium against the bridge in this process.
The screenshots of the pages are taken against the real stack (test_screenshots.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.status.conftest import MakeBridge
from tests.status.fleet import HOSTILE_MODEL, HOSTILE_POOL, blind_pool, busy_pool, hostile_pool
from tests.status.test_page import Elements
from tests.support.chromium import chromium


async def test_the_page_renders_with_every_pool_and_no_injected_markup(
        make_bridge: MakeBridge, tmp_path: Path) -> None:
    bridge = await make_bridge([*busy_pool("busy"), *blind_pool("blind"), *hostile_pool()])
    dom = Elements(await asyncio.to_thread(chromium, tmp_path, "--dump-dom",
                                           f"{bridge.url}/status"))
    pools = [a["data-pool"] for tag, a in dom.tags if tag == "tr" and "data-pool" in a]
    assert set(pools) == {"busy", "blind", HOSTILE_POOL}
    assert [tag for tag, _ in dom.tags if tag in ("script", "img", "iframe")] == []
    assert HOSTILE_POOL in dom.text and HOSTILE_MODEL in dom.text
