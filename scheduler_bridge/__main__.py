"""`python -m poolscope.scheduler_bridge` / `poolscope-scheduler-bridge`: serve pool summaries.

Exit codes: 0 after SIGTERM/SIGINT, 2 for invalid flags, 1 when the listen
address cannot be bound.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from poolscope.bridge.serve import add_bridge_flags, serve_bridge
from poolscope.scheduler_bridge.app import create_app
from poolscope.service import ports
from poolscope.service.argtypes import ServiceParser
from poolscope.service.listener import HttpLimits
from poolscope.service.web import add_common_flags

PROG = "poolscope-scheduler-bridge"


def build_parser() -> argparse.ArgumentParser:
    p = ServiceParser(
        prog=PROG, description="Serve every Proxy pool's summary from the proxy_pool: rollups.")
    add_bridge_flags(p)
    # Every Scheduler replica and operator polls this one: room for hundreds of clients.
    add_common_flags(p, default_listen=ports.loopback(ports.SCHEDULER_BRIDGE),
                     default_log_level="INFO", limits=HttpLimits(max_connections=512))
    return p


def main(argv: Sequence[str] | None = None) -> int:
    return serve_bridge(PROG, build_parser().parse_args(argv), create_app)


if __name__ == "__main__":
    sys.exit(main())
