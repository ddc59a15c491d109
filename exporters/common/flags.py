"""Flag values the exporters share, checked before anything starts.

Each check raises UsageError with the one line the command prints before it exits 2.
"""

from __future__ import annotations

import argparse
import math
import urllib.parse

from exporters.common.thresholds import FRESH_S
from exporters.common.web import UsageError


class UsageParser(argparse.ArgumentParser):
    """argparse whose errors become UsageError (one line, exit 2) instead of usage text."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def seconds(flag: str, value: float) -> float:
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"{flag}: must be a positive number of seconds, got {value}")
    return value


def sample_interval(flag: str, value: float) -> float:
    """A background sampling interval: a sample older than FRESH_S is not served, so
    sampling less often would blank the series between two samples."""
    seconds(flag, value)
    if value > FRESH_S:
        raise UsageError(f"{flag}: at most {FRESH_S:g} s (a sample older than that is "
                         f"not fresh), got {value:g}")
    return value


def http_url(flag: str, value: str) -> str:
    """An http(s) URL with a host and, if given, a usable port."""
    parsed = urllib.parse.urlsplit(value)
    try:
        port_ok = parsed.port is None or parsed.port > 0
    except ValueError:
        port_ok = False
    if parsed.scheme not in ("http", "https") or not parsed.hostname or not port_ok:
        raise UsageError(f"{flag}: expected an http(s) URL with a host and a valid port, "
                         f"got {value!r}")
    return value
