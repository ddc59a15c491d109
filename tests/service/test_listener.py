"""The listener's own bounds: how many connections fit under the descriptor limit,
and how much a failing accept() may write to the log."""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import subprocess
import sys
from typing import Any

import pytest

from poolscope.service.connection_cap import DESCRIPTOR_RESERVE, descriptor_budget
from poolscope.service.internals import ACCEPT_FAILED
from poolscope.service.listener import AcceptErrors


@pytest.mark.parametrize("nofile, wanted", [(1024, 64), (1024, 512), (256, 64), (128, 32)])
def test_connections_and_an_accept_burst_fit_under_the_descriptor_limit(
        nofile: int, wanted: int) -> None:
    """Measured in a process limited as a systemd unit limits it; its budget leaves
    the collectors DESCRIPTOR_RESERVE whatever the cap asked for."""
    probe = ("import json, os; from poolscope.service.connection_cap import descriptor_budget; "
             f"b = descriptor_budget({wanted}); "
             "print(json.dumps([b.connections, b.backlog, len(os.listdir('/proc/self/fd'))]))")
    out = subprocess.run(["prlimit", f"--nofile={nofile}", sys.executable, "-c", probe],
                         check=True, capture_output=True, text=True, timeout=60).stdout
    connections, backlog, in_use = json.loads(out)
    assert 1 <= connections <= wanted and backlog >= 8
    assert in_use + connections + 2 * backlog + DESCRIPTOR_RESERVE <= nofile
    if nofile == 1024:  # the systemd default: the default caps fit as asked
        assert connections == wanted


def test_an_unlimited_process_gets_the_cap_it_asked_for() -> None:
    assert descriptor_budget(64).connections == 64


def test_accept_failures_are_summarised_not_logged_one_traceback_each(
        caplog: pytest.LogCaptureFixture) -> None:
    """asyncio reports every failed accept() of a flood past the descriptor limit,
    with a traceback: megabytes a second. One line per interval, with a count."""
    others: list[dict[str, Any]] = []
    loop = asyncio.new_event_loop()
    try:
        handler = AcceptErrors(lambda _, context: others.append(context), every_s=3600)
        emfile = OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        with caplog.at_level(logging.WARNING):
            for _ in range(1000):
                handler(loop, {"message": ACCEPT_FAILED, "exception": emfile})
            handler(loop, {"message": "something else"})
    finally:
        loop.close()
    lines = [r for r in caplog.records if "accept()" in r.getMessage()]
    assert len(lines) == 1 and not lines[0].exc_info
    assert others == [{"message": "something else"}]  # passed on to the handler before


def test_the_summary_counts_what_it_held_back(caplog: pytest.LogCaptureFixture) -> None:
    class Clock:
        now = 0.0

        def time(self) -> float:
            return self.now

    clock = Clock()
    handler = AcceptErrors(None, every_s=10)
    failure = {"message": ACCEPT_FAILED, "exception": OSError(errno.EMFILE, "x")}
    with caplog.at_level(logging.WARNING):
        for second in range(25):
            clock.now = float(second)
            for _ in range(100):
                handler(clock, failure)  # type: ignore[arg-type]
    counts = [r.args[0] for r in caplog.records if "accept()" in r.getMessage()]
    assert counts == [1, 1000, 1000]  # at 0 s, 10 s and 20 s: every failure counted once
