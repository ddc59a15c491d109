"""How every Poolscope service logs: `--log.level` and `--log.format logfmt|json`.

The same two flags and formats as node_exporter and the other exporter-toolkit
services (their promslog), so a log pipeline that parses those parses ours: logfmt
(`ts=... level=info logger=... msg="..."`) for people and grep, JSON for shippers.
Levels are named as they are there (debug, info, warn, error); `warning` and the
upper-case names of the older `--log-level` are accepted too.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from typing import Any

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
          "warning": logging.WARNING, "error": logging.ERROR}
FORMATS = ("logfmt", "json")
_NAMES = {logging.DEBUG: "debug", logging.INFO: "info", logging.WARNING: "warn",
          logging.ERROR: "error", logging.CRITICAL: "error"}


def log_level(value: str) -> str:
    """A level name as promslog spells it; refused when it is none."""
    level = LEVELS.get(value.strip().lower())
    if level is None:
        raise argparse.ArgumentTypeError(
            f"expected one of debug, info, warn, error, got {value!r}")
    return _NAMES[level]


def _fields(record: logging.LogRecord) -> dict[str, str]:
    ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    fields = {"ts": f"{ts}.{int(record.msecs):03d}Z", "level": _NAMES.get(record.levelno, "info"),
              "logger": record.name, "msg": record.getMessage()}
    if record.exc_info:
        fields["err"] = logging.Formatter().formatException(record.exc_info)
    return fields


def _logfmt_value(value: str) -> str:
    if value and not any(c in value for c in ' ="\\\n\t') and value.isprintable():
        return value
    return json.dumps(value, ensure_ascii=False)  # quoted, with \\n, \\" and \\\\ escaped


class LogfmtFormatter(logging.Formatter):
    """One `key=value` line per record; a value with spaces or quotes is quoted, so
    a message can never start a second line or forge a field."""

    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={_logfmt_value(v)}" for k, v in _fields(record).items())


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_fields(record), ensure_ascii=False)


def configure(level: str, fmt: str, stream: Any = None) -> None:
    """Route every logger to stderr at `level` (a `log_level` name) in `fmt`."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else LogfmtFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(LEVELS[level])
