"""The argparse parser and value types every Poolscope command shares.

One place, so a bad flag reads the same way whichever tool it was given to: one
line, `PROG: error: ...` naming the flag, and exit status 2, before anything starts.
Each type refuses what its flag cannot mean (NaN, infinities, a zero or a negative
where those mean nothing, an id outside the shared charset, a URL that is not
http(s)), so no value is accepted only to fail, or be ignored, later.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import re
import sys
import urllib.parse
from collections.abc import Sequence
from typing import NamedTuple, NoReturn

from poolscope.service.identity import ID_RULE, valid_id

LOOPBACK = "127.0.0.1"
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


class UsageError(Exception):
    """A command-line value is invalid; the message is the one line to print."""


def refuse(prog: str, error: UsageError) -> int:
    """Print the one line a bad flag deserves; the exit code for it."""
    print(f"{prog}: error: {error}", file=sys.stderr)
    return 2


class OneLineErrorParser(argparse.ArgumentParser):
    """A bad flag gives one line on stderr and exit status 2.

    argparse's default prints the whole usage block first, which buries the
    reason in a log tail. `parse` raises UsageError instead, for a command that
    checks more after parsing and reports every refusal through one path.
    """

    _raising = False

    def error(self, message: str) -> NoReturn:
        if self._raising:
            raise UsageError(message)
        raise SystemExit(refuse(self.prog, UsageError(message)))

    def parse(self, argv: Sequence[str] | None) -> argparse.Namespace:
        self._raising = True
        try:
            return self.parse_args(argv)
        finally:
            self._raising = False


# --- addresses --------------------------------------------------------------------

class Listen(NamedTuple):
    host: str
    port: int

    def url(self, scheme: str = "http") -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}"


def _address(text: str, lowest_port: int) -> Listen:
    """HOST:PORT or [IPv6]:PORT; a bare PORT (or :PORT) stays on loopback."""
    host, sep, port_text = text.rpartition(":")
    if not sep:
        port_text = text
    if not (port_text.isascii() and port_text.isdigit()):
        raise argparse.ArgumentTypeError(f"expected HOST:PORT or [IPv6]:PORT, got {text!r}")
    port = int(port_text)
    if not lowest_port <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} out of range {lowest_port}..65535")
    host = host.removeprefix("[").removesuffix("]") or LOOPBACK
    if ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise argparse.ArgumentTypeError(f"bad IPv6 address {host!r}") from None
    return Listen(host, port)


def parse_listen(text: str) -> Listen:
    """A service's --listen: a fixed port, the one its scrape config and banner name."""
    return _address(text, 1)


def host_port(text: str) -> Listen:
    """HOST:PORT where port 0 asks the kernel for a free one, for a harness that
    reads the bound address back."""
    return _address(text, 0)


def http_url(value: str) -> str:
    """An http(s) URL with a host and, if given, a usable port."""
    parsed = urllib.parse.urlsplit(value)
    try:
        port_ok = parsed.port is None or parsed.port > 0
    except ValueError:
        port_ok = False
    if parsed.scheme not in ("http", "https") or not parsed.hostname or not port_ok:
        raise argparse.ArgumentTypeError(
            f"expected an http(s) URL with a host and a valid port, got {value!r}")
    return value


# --- numbers ----------------------------------------------------------------------

def _finite_float(value: str, lowest: float, inclusive: bool, highest: float = math.inf) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    above = number >= lowest if inclusive else number > lowest  # False for NaN
    if not above or not number <= highest or math.isinf(number):
        bound = f"{'>=' if inclusive else '>'} {lowest:g}"
        if not math.isinf(highest):
            bound += f" and <= {highest:g}"
        raise argparse.ArgumentTypeError(f"must be a finite number {bound}, got {value!r}")
    return number


def positive_float(value: str) -> float:
    return _finite_float(value, 0.0, inclusive=False)


def non_negative_float(value: str) -> float:
    return _finite_float(value, 0.0, inclusive=True)


def ratio(value: str) -> float:
    """A fraction of a whole (a KV-cache usage, a share of memory): 0..1."""
    return _finite_float(value, 0.0, inclusive=True, highest=1.0)


def positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value!r}")
    return number


# --- names ------------------------------------------------------------------------

def identifier(value: str) -> str:
    """argparse type for a proxy_id or instance_id flag: refused at start-up, since
    an id outside the charset would be published but then only partly served (the
    bridges refuse it in a URL, a non-UTF-8 one fails every page it is on)."""
    if not valid_id(value):
        shown = repr(value[:128]) + (f" ({len(value)} characters)" if len(value) > 128 else "")
        raise argparse.ArgumentTypeError(f"expected {ID_RULE}, got {shown}")
    return value


def label_name(value: str) -> str:
    """A Prometheus label name another program publishes: one that cannot be a label
    would match no series, and the pool would read as empty rather than misnamed."""
    if not LABEL_NAME.fullmatch(value) or value.startswith("__"):
        raise argparse.ArgumentTypeError(
            f"expected a label name ([a-zA-Z_][a-zA-Z0-9_]*, not __reserved), got {value!r}")
    return value
