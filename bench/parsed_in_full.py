"""The Scheduler bridge with every answer parsed in full: no label sets kept from the
last answer (bridge/vector_layout.py).

    python -m bench.parsed_in_full BRIDGE-FLAGS...

bench.scheduler_bridge runs it side by side with the bridge as shipped, to show what
the layout is worth; it is the bridge's own main with that one thing switched off.
"""

from __future__ import annotations

import sys

from poolscope.bridge import promapi
from poolscope.scheduler_bridge.__main__ import main


def without_layouts() -> None:
    """No answer is large enough to have its layout kept: each is parsed in full."""
    promapi.LAYOUT_MIN_SERIES = sys.maxsize


if __name__ == "__main__":
    without_layouts()
    sys.exit(main())
