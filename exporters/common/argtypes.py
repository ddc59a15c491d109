"""argparse types and conventions every Poolscope command shares.

One place, so a bad flag reads the same way (one line, exit 2) whichever tool it
was given to.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from exporters.common.identity import ID_RULE, valid_id


class OneLineErrorParser(argparse.ArgumentParser):
    """Bad flags give one line on stderr and exit status 2, like the exporters.

    argparse's default prints the whole usage block first, which buries the
    reason when the demo launcher shows a child's log tail.
    """

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def host_port(value: str) -> tuple[str, int]:
    """argparse type for HOST:PORT; port 0 asks the kernel for a free one."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    return host, int(port)


def _finite_float(value: str, lowest: float, inclusive: bool) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    in_range = number >= lowest if inclusive else number > lowest  # False for NaN
    if not in_range or number == float("inf"):
        bound = ">=" if inclusive else ">"
        raise argparse.ArgumentTypeError(
            f"must be a finite number {bound} {lowest:g}, got {value!r}")
    return number


def positive_float(value: str) -> float:
    return _finite_float(value, 0.0, inclusive=False)


def non_negative_float(value: str) -> float:
    return _finite_float(value, 0.0, inclusive=True)


def positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value!r}")
    return number


def identifier(value: str) -> str:
    """argparse type for a proxy_id or instance_id flag: refused at start-up, since
    an id outside the charset would be published but then only partly served (the
    bridges refuse it in a URL, a non-UTF-8 one fails every page it is on)."""
    if not valid_id(value):
        shown = repr(value[:128]) + (f" ({len(value)} characters)" if len(value) > 128 else "")
        raise argparse.ArgumentTypeError(f"expected {ID_RULE}, got {shown}")
    return value
