"""Suite-wide settings.

Hypothesis' per-example deadline (200 ms) is a timing assertion: on a busy CI
machine one slow example fails a correct property. Speed is measured in bench/,
so no property test here has a deadline.

`make unit` runs `-m "not integration"`: what needs nothing but the venv. A test
is `integration` when it says so, when it lives in a directory that runs a stack,
or when its module uses the harness that starts real servers or Prometheus' own
tools (Debian packages), so no test file has to remember to say so.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

from deploy.demo.processes import PORT_RANGE_ENV, ProcessGroup
from harness.cluster import demo_cluster
from harness.commands import command_process
from harness.prometheus import binary, running_prometheus
from tests.support.alertmanager import running_alertmanager
from tests.support.chromium import chromium

settings.register_profile("poolscope", deadline=None)
settings.load_profile("poolscope")

TESTS = Path(__file__).parent
STACK_DIRS = frozenset({"integration", "live", "load", "scale"})
REAL_SERVERS = (ProcessGroup, binary, chromium, command_process, demo_cluster,
                running_alertmanager, running_prometheus)


def _needs_real_servers(item: pytest.Item) -> bool:
    if item.path.relative_to(TESTS).parts[0] in STACK_DIRS:
        return True
    module = getattr(item, "module", None)
    return module is not None and any(
        value is harness for value in vars(module).values() for harness in REAL_SERVERS)


# Below the kernel's ephemeral ports (32768-60999 on Linux) and above the services'
# defaults (docs/ports.md): each xdist worker picks the ports it hands to children
# from its own block, so a port picked in one worker is never bound by another
# before its child binds it (deploy.demo.processes.port_or_free).
PORT_BLOCKS_FROM, PORT_BLOCK = 12000, 2000


def pytest_configure(config: pytest.Config) -> None:
    # xdist names the worker in its workerinput; PYTEST_XDIST_WORKER is not set yet here.
    worker = str(getattr(config, "workerinput", {}).get("workerid", "gw0"))
    index = int(worker.removeprefix("gw")) if worker.removeprefix("gw").isdigit() else 0
    low = PORT_BLOCKS_FROM + (index % 10) * PORT_BLOCK
    os.environ[PORT_RANGE_ENV] = f"{low}-{low + PORT_BLOCK - 1}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if not item.get_closest_marker("integration") and _needs_real_servers(item):
            item.add_marker(pytest.mark.integration)
