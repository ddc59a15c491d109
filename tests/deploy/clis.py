"""The console scripts the deploy configs start, checked with the services' own parsers.

A unit file or a container spec that passes a flag the service lacks, or a
value it rejects, fails only on the day someone deploys it. Parsing the argv
each config would run, with the parser the service itself uses, moves that
failure into the test suite.
"""

from __future__ import annotations

import argparse
import io
import tomllib
from collections.abc import Callable, Sequence
from contextlib import redirect_stderr

from harness.prometheus import REPO
from poolscope.exporters.instance.config import parse as parse_instance_exporter
from poolscope.proxy_bridge.__main__ import build_parser as proxy_bridge_parser
from poolscope.scheduler_bridge.__main__ import build_parser as scheduler_bridge_parser
from poolscope.service.argtypes import UsageError


class BadArguments(AssertionError):
    """The service would refuse to start with this argv; the message is its own."""


def console_scripts() -> dict[str, str]:
    """pyproject's [project.scripts]: the names `pip install` puts on PATH."""
    with (REPO / "pyproject.toml").open("rb") as f:
        return dict(tomllib.load(f)["project"]["scripts"])


def _instance_exporter(argv: Sequence[str]) -> None:
    try:
        parse_instance_exporter(argv)
    except UsageError as e:
        raise BadArguments(str(e)) from e


def _argparse(build: Callable[[], argparse.ArgumentParser]) -> Callable[[Sequence[str]], None]:
    def parse(argv: Sequence[str]) -> None:
        stderr = io.StringIO()
        try:
            with redirect_stderr(stderr):
                build().parse_args(argv)
        except SystemExit as e:
            raise BadArguments(stderr.getvalue().strip()) from e
    return parse


PARSERS: dict[str, Callable[[Sequence[str]], None]] = {
    "poolscope-instance-exporter": _instance_exporter,
    "poolscope-scheduler-bridge": _argparse(scheduler_bridge_parser),
    "poolscope-proxy-bridge": _argparse(proxy_bridge_parser),
}


def check_command(command: Sequence[str]) -> None:
    """Raise BadArguments unless `command` is a Poolscope service its parser accepts.

    command[0] may be a path; its last component must be a console script.
    """
    script = command[0].rsplit("/", 1)[-1]
    if script not in console_scripts():
        raise BadArguments(f"{command[0]!r} is not a console script in pyproject.toml")
    if script not in PARSERS:
        raise BadArguments(f"{script!r} is not a service the deploy configs may start")
    PARSERS[script](command[1:])
