"""What can I stop on the bridge: `GET /debug/idle_instances`, its section of the fleet
page and `poolscope-status --idle`, over a canned Prometheus that answers the pools'
rollups and the Instances' raw series."""

from __future__ import annotations

import json
from typing import Any

import pytest

from poolscope.contract.thresholds import IDLE_S
from poolscope.scheduler_bridge.idle_instances import ROUTE
from poolscope.scheduler_bridge.status.cli import main
from tests.proxy_bridge.pool_data import Inst
from tests.status.conftest import MakeBridge, StatusBridge
from tests.status.fleet import H100, blind_pool, busy_pool, field_series
from tests.status.test_cli import status
from tests.status.test_drill_down import Rows
from tests.status.test_page import Elements

# busy counts 1 idle and 2 unknown, blind 0 and 2; gw measures no idleness.
LOCAL = {
    "busy": [Inst("a", idle_s=900.0, gpus=4, unhealthy_gpus=1, gpu_model=H100),
             Inst("b", idle_s=None, gpus=4, gpu_model=H100), Inst("c", idle_s=None, gpus=None),
             Inst("d", idle_s=12.0, gpus=1, gpu_model=H100)],
    "blind": [Inst("x", idle_s=None, gpus=None), Inst("y", idle_s=None, gpus=None)],
}


async def fleet(make_bridge: MakeBridge) -> StatusBridge:
    return await make_bridge([*busy_pool("busy"), *blind_pool("blind"),
                              field_series("gw", "instances.total", "2")], local=LOCAL)


async def test_the_route_lists_idle_and_unknown_apart_and_counts_their_cards(
        make_bridge: MakeBridge) -> None:
    bridge = await fleet(make_bridge)
    resp = await bridge.http.get(ROUTE)
    assert resp.status == 200
    doc: dict[str, Any] = await resp.json()
    assert doc["idle_threshold_s"] == IDLE_S and doc["unmeasured"] == ["gw"]
    pools = {p["proxy_id"]: p for p in doc["pools"]}
    assert [i["instance_id"] for i in pools["busy"]["idle_instances"]] == ["a"]
    assert [i["instance_id"] for i in pools["busy"]["unknown_instances"]] == ["b", "c"]
    assert [i["instance_id"] for i in pools["blind"]["unknown_instances"]] == ["x", "y"]
    assert all(p["agrees"] for p in doc["pools"])
    (h100,) = doc["gpu_models"]
    # busy_pool's capacity: 8 healthy (3.5 busy) and 1 unhealthy H100.
    assert h100 == {"model": H100, "total": 9, "used": 3.5, "free": 4.5, "unhealthy": 1,
                    "idle": 4, "idle_unknown": 4}


async def test_a_failed_read_is_a_503_and_the_page_says_why(make_bridge: MakeBridge) -> None:
    bridge = await fleet(make_bridge)
    assert (await bridge.http.get("/debug/proxy_pool_resources")).status == 200
    bridge.prometheus.fail_matching = "poolscope_proxy_instance_idle_seconds"
    resp = await bridge.http.get(ROUTE)
    assert resp.status == 503 and "canned failure" in (await resp.json())["cause"]
    page = Rows(await (await bridge.http.get("/status")).text(), "data-instance")
    assert page.rows == {}  # not an empty list, which would say nothing can be stopped
    assert any(t.startswith("The Instances could not be read") for t in page.text)
    assert "busy" in Rows(await (await bridge.http.get("/status")).text(), "data-pool").rows


async def test_the_fleet_page_shows_what_can_be_stopped(make_bridge: MakeBridge) -> None:
    bridge = await fleet(make_bridge)
    html = await (await bridge.http.get("/status")).text()
    instances = Rows(html, "data-instance").rows
    assert instances["a"] == ["busy", "a", "15 min", "alive", f"4 {H100} (1 unhealthy)"]
    assert instances["c"] == ["busy", "c", "alive", "no GPU data"]
    assert set(instances) == {"a", "b", "c", "x", "y"}  # d is busy: not listed
    # The section's model rows come first (the fleet's GPU tables follow it).
    held = Rows(html, "data-model").rows[H100]
    assert held == [H100, "9", "3.5", "4.5", "1", "4", "4"]
    assert "Idleness not measured in gw." in Elements(html).text


async def test_the_cli_shows_it_and_prints_the_routes_json(make_bridge: MakeBridge) -> None:
    bridge = await fleet(make_bridge)
    code, out, err = await status("--bridge-url", bridge.url, "--idle")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith("poolscope status: what can I stop")
    (row,) = [line.split() for line in lines if line.startswith("busy ") and " a " in line]
    assert row[:5] == ["busy", "a", "15", "min", "alive"] and H100.split()[0] in row
    assert any(line.startswith("IDLE UNKNOWN") for line in lines)
    assert any(line.startswith("idleness not measured in gw") for line in lines)
    code, out, _ = await status("--bridge-url", bridge.url, "--idle", "--json")
    served = await (await bridge.http.get(ROUTE)).json()
    printed = json.loads(out)
    assert code == 0 and printed.pop("age_s") >= 0  # the snapshot ages between the reads
    assert printed == {k: v for k, v in served.items() if k != "age_s"}


def test_idle_takes_no_pool(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--idle", "busy"])
    assert exit_.value.code == 2 and "--idle shows every pool" in capsys.readouterr().err
