"""What can I stop on the real stack (tests/status/idle_fleet.py): Instances idle for
90, 17 and 7 minutes, one busy, two never dispatched to, and a pool without a Proxy.

The route's lists must agree with the idle counts of the summaries the Scheduler is
served, and its cards with the fleet's GPU capacity; the fleet page must show the same,
and the README's screenshot is taken from that rendering
(POOLSCOPE_UPDATE_SCREENSHOTS=1 copies it into docs/screenshots/).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.polling import eventually
from poolscope.scheduler_bridge.idle_instances import ROUTE
from tests.reliability.stack import fetch_json
from tests.status.idle_fleet import H100, L40S, IdleFleet, Member, PoolSpec, idle_fleet
from tests.status.test_screenshot_files import IDLE_SHOT, IDLE_WINDOW
from tests.status.test_screenshots import Tables, render

pytestmark = pytest.mark.integration

POOLS = (
    PoolSpec("pool-1", (Member("pool-1-inst-1", H100, 4, 5400.0),
                        Member("pool-1-inst-2", H100, 4, 0.0),
                        Member("pool-1-inst-3", L40S, 2, None))),
    PoolSpec("pool-2", (Member("pool-2-inst-1", L40S, 2, 1000.0),
                        Member("pool-2-inst-2", L40S, 2, 400.0),
                        Member("pool-2-inst-3", H100, 4, None))),
    PoolSpec("pool-3", (Member("pool-3-inst-1", H100, 4, None),), embedded=False),
)
# A few scrapes and evaluations, on a loaded machine.
WAIT_S = 90.0
Reading = dict[str, Any]
EXPECTED: Reading = {
    # Per pool, the idle Instances (longest first) and the unknown ones.
    "pools": {"pool-1": (["pool-1-inst-1"], ["pool-1-inst-3"]),
              "pool-2": (["pool-2-inst-1", "pool-2-inst-2"], ["pool-2-inst-3"])},
    "unmeasured": ["pool-3"],
    # Per model: every card in the fleet, those idle Instances hold, those unknown ones do.
    "cards": {H100: (16, 4, 4), L40S: (6, 4, 2)},
}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IdleFleet]:
    with idle_fleet(tmp_path_factory.mktemp("idle"), POOLS) as f:
        yield f


def get(url: str) -> Any:
    """The JSON at `url`, or its status: a bridge without a snapshot yet is asked again."""
    try:
        status, body = fetch_json(url)
    except OSError as e:  # a slow answer on a loaded box
        return {"status": repr(e)}
    return body if status == 200 else {"status": status}


def route_reading(doc: Reading) -> Reading:
    if "pools" not in doc:
        return doc
    return {"pools": {p["proxy_id"]: ([i["instance_id"] for i in p["idle_instances"]],
                                      [i["instance_id"] for i in p["unknown_instances"]])
                      for p in doc["pools"]},
            "unmeasured": doc["unmeasured"],
            "cards": {g["model"]: (g["total"], g["idle"], g["idle_unknown"])
                      for g in doc["gpu_models"]}}


def test_the_idle_list_agrees_with_the_summaries_counts(fleet: IdleFleet) -> None:
    doc = eventually(lambda: get(f"{fleet.scheduler_bridge_url}{ROUTE}"),
                     lambda d: route_reading(d) == EXPECTED, WAIT_S, "the idle Instances")
    assert all(p["agrees"] for p in doc["pools"])
    idle_s = {i["instance_id"]: i["idle_s"] for p in doc["pools"] for i in p["idle_instances"]}
    assert idle_s["pool-1-inst-1"] >= 5400 and 400 <= idle_s["pool-2-inst-2"] < 1000
    # The summaries the Scheduler is served count the Instances the route lists.
    served = get(f"{fleet.scheduler_bridge_url}/debug/proxy_pool_resources")
    counts = {pid: (s["instances"]["idle"], s["instances"]["idle_unknown"])
              for pid, s in served["pools"].items()}
    assert counts == {"pool-1": (1, 1), "pool-2": (2, 1), "pool-3": (None, None)}
    assert counts == {p["proxy_id"]: (len(p["idle_instances"]), len(p["unknown_instances"]))
                      for p in doc["pools"]} | {"pool-3": (None, None)}


def page_reading(dom: str) -> Reading:
    page = Tables(dom)
    idle = page.rows("idle-instances", "data-instance")
    unknown = page.rows("idle-unknown", "data-instance")
    held = page.rows("idle-gpus", "data-model")
    return {"idle": {i: (r["Pool"], r["GPUs held"]) for i, r in idle.items()},
            "unknown": sorted(unknown),
            "held": {m: (r["Total"], r["Held by idle"], r["Held, idle unknown"])
                     for m, r in held.items()}}


PAGE: Reading = {
    "idle": {"pool-1-inst-1": ("pool-1", f"4 {H100}"), "pool-2-inst-1": ("pool-2", f"2 {L40S}"),
             "pool-2-inst-2": ("pool-2", f"2 {L40S}")},
    "unknown": ["pool-1-inst-3", "pool-2-inst-3"],
    "held": {H100: ("16", "4", "4"), L40S: ("6", "4", "2")},
}


def test_the_fleet_page_shows_what_can_be_stopped(fleet: IdleFleet, tmp_path: Path) -> None:
    shot = tmp_path / IDLE_SHOT.name

    def reading() -> Reading | None:
        dom = render(tmp_path, f"{fleet.scheduler_bridge_url}/status", shot, IDLE_WINDOW)
        return None if dom is None else page_reading(dom)

    eventually(reading, lambda r: r == PAGE, WAIT_S, "/status in Chromium", every=1.0)
    if os.environ.get("POOLSCOPE_UPDATE_SCREENSHOTS") == "1":
        shutil.copyfile(shot, IDLE_SHOT)
