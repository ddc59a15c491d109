"""`python -m exporters.instance` / `poolscope-instance-exporter`.

Exit codes: 0 after SIGTERM/SIGINT, 2 for invalid flags, 1 when the listen
address cannot be bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Sequence

from exporters.instance.config import Config, UsageError, parse
from exporters.instance.server import make_app, serving
from exporters.instance.service import InstanceExporter

log = logging.getLogger("exporters.instance")


class ListenError(Exception):
    """The listen address could not be bound."""


async def serve(config: Config) -> None:
    exporter = InstanceExporter(config.settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, _set_draining, exporter, True)
    loop.add_signal_handler(signal.SIGUSR2, _set_draining, exporter, False)
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(exporter.stop)  # runs last: after the listener closed
        try:
            await stack.enter_async_context(serving(
                make_app(exporter, config.auth_token), config.listen.host, config.listen.port,
                tls=config.tls, limits=config.limits))
        except OSError as e:
            raise ListenError(f"cannot listen on {config.url()}: {e.strerror or e}") from e
        await exporter.start()
        print(f"poolscope instance exporter serving {config.url()}/metrics",
              file=sys.stderr, flush=True)
        await stop.wait()


def _set_draining(exporter: InstanceExporter, draining: bool) -> None:
    exporter.admission.draining = draining
    log.warning("admission draining %s", "on" if draining else "off")


def main(argv: Sequence[str] | None = None) -> int:
    prog = "poolscope-instance-exporter"
    try:
        config = parse(argv)
    except UsageError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=config.log_level, format="%(asctime)s %(levelname)s %(message)s")
    try:
        asyncio.run(serve(config))
    except ListenError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
