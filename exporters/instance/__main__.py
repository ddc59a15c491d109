"""`python -m poolscope.exporters.instance` / `poolscope-instance-exporter`.

Exit codes: 0 after SIGTERM/SIGINT, 2 for invalid flags, 1 when the listen
address cannot be bound.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Sequence
from types import ModuleType

from poolscope.exporters.instance.config import PROG, Config, build_parser, parse
from poolscope.exporters.instance.server import make_app
from poolscope.exporters.instance.service import InstanceExporter
from poolscope.service.web import command, serve_until_stopped

# build_parser: every console script's module offers its parser, for the flag tests.
__all__ = ["build_parser", "main"]
log = logging.getLogger("poolscope.exporters.instance")


async def serve(config: Config, nvml: ModuleType | None = None) -> None:
    """Run the exporter until SIGTERM; `nvml` replaces pynvml (the demo's simulated
    GPUs), everything else is the shipped path."""
    exporter = InstanceExporter(config.settings, nvml=nvml)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, _set_draining, exporter, True)
    loop.add_signal_handler(signal.SIGUSR2, _set_draining, exporter, False)
    try:
        await serve_until_stopped(make_app(exporter, config.service.exposure),
                                  config.service, prog=PROG, started=exporter.start)
    finally:
        await exporter.stop()  # after the listener closed


def _set_draining(exporter: InstanceExporter, draining: bool) -> None:
    exporter.admission.draining = draining
    log.warning("admission draining %s", "on" if draining else "off")


def main(argv: Sequence[str] | None = None) -> int:
    return command(PROG, argv, parse, serve)


if __name__ == "__main__":
    sys.exit(main())
