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
import os
import re
import sys
import urllib.parse
from collections.abc import Sequence
from typing import Any, NamedTuple, NoReturn

from poolscope.service import build
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


ENV_PREFIX = "POOLSCOPE_"
_ASKING = frozenset({"-h", "--help", "--version"})
_TRUE, _FALSE = frozenset({"1", "true", "yes", "on"}), frozenset({"0", "false", "no", "off"})


def env_name(action: argparse.Action) -> str:
    """`--web.listen-address` reads POOLSCOPE_WEB_LISTEN_ADDRESS: the flag's first
    (canonical) name, as dcgm-exporter names its DCGM_EXPORTER_* variables."""
    return ENV_PREFIX + action.option_strings[0].lstrip("-").upper().replace(".", "_").replace(
        "-", "_")


class ServiceParser(OneLineErrorParser):
    """A Poolscope console script's parser: every flag can also come from its POOLSCOPE_*
    environment variable (a container or a systemd unit configures it so), and
    `--version` says which build runs.

    The command line wins over the environment, the environment over the default.
    A variable's value goes through the flag's own type and choices, so a bad one
    is refused at start-up like a bad flag, in one line naming both; an empty one
    counts as unset (systemd writes `KEY=` for a value left out).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # No abbreviations (kingpin, which the Go exporters use, has none either): a
        # prefix of a flag would not be seen to replace its variable.
        super().__init__(*args, allow_abbrev=False, **kwargs)
        self.add_argument("--version", action=_Version, help="print the version and exit")

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None,
                         ) -> tuple[argparse.Namespace, list[str]]:
        argv = list(sys.argv[1:] if args is None else args)
        if not _ASKING.intersection(argv):  # --help and --version answer whatever is set
            self._apply_environment(argv)
        return super().parse_known_args(argv, namespace)

    def configurable(self) -> list[argparse.Action]:
        """The actions a variable can set: every flag but --help and --version."""
        return [a for a in self._actions if a.option_strings
                and not isinstance(a, argparse._HelpAction | _Version)]

    def format_help(self) -> str:
        for action in self.configurable():
            name = env_name(action)
            if action.help is not None and name not in action.help:
                action.help = f"{action.help} [${name}]"
        return super().format_help()

    def _apply_environment(self, argv: Sequence[str]) -> None:
        given = {arg.partition("=")[0] for arg in argv if arg.startswith("--")}
        # A flag on the command line replaces its variable (an appended list included).
        from_env = {a: text for a in self.configurable() if (text := os.environ.get(env_name(a)))
                    and not given.intersection(a.option_strings)}
        for group in self._mutually_exclusive_groups:
            members = group._group_actions
            if any(o in given for a in members for o in a.option_strings):
                for a in members:  # the command line chose one: the environment yields
                    from_env.pop(a, None)
            named = [env_name(a) for a in members if a in from_env]
            if len(named) > 1:
                self.error(f"{' and '.join(named)} exclude each other: set one")
            if named:
                group.required = False
        for action, text in from_env.items():
            action.default = self._from_env(action, env_name(action), text)
            action.required = False

    def _from_env(self, action: argparse.Action, name: str, text: str) -> Any:
        where = f"{name} (for {action.option_strings[0]})"
        if action.nargs == 0:  # a switch: store_true, BooleanOptionalAction
            word = text.strip().lower()
            if word not in _TRUE | _FALSE:
                self.error(f"{where}: expected true or false, got {text!r}")
            on = word in _TRUE
            return on if action.const is None or action.const is True else (
                action.const if on else action.default)
        values = [v.strip() for v in text.split(",")] if isinstance(
            action, argparse._AppendAction) else [text]
        converted = []
        for value in values:
            try:
                item = action.type(value) if callable(action.type) else value
            except (argparse.ArgumentTypeError, TypeError, ValueError) as e:
                self.error(f"{where}: {e}")
            if action.choices is not None and item not in action.choices:
                shown = ", ".join(map(repr, action.choices))
                self.error(f"{where}: invalid choice {value!r} (choose from {shown})")
            converted.append(item)
        return converted if isinstance(action, argparse._AppendAction) else converted[0]


class _Version(argparse.Action):
    """Prints the build line only when asked: building a parser reads no git state."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        print(build.version_text(parser.prog))
        parser.exit()


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


def _integer(value: str, lowest: int, what: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from None
    if number < lowest:
        raise argparse.ArgumentTypeError(f"must be {what}, got {value!r}")
    return number


def positive_int(value: str) -> int:
    return _integer(value, 1, "a positive integer")


def non_negative_int(value: str) -> int:
    return _integer(value, 0, "an integer >= 0")


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
