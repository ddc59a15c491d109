"""--log.format logfmt|json: one parseable line per record, whatever the message holds."""

from __future__ import annotations

import argparse
import io
import json
import logging
import re
from collections.abc import Iterator

import pytest

from poolscope.service import logs

LOGFMT_PAIR = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """A stream `configure` logs to; the root logger as it was afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield io.StringIO()
    root.handlers[:] = handlers
    root.setLevel(level)


def logfmt_fields(line: str) -> dict[str, str]:
    pairs = LOGFMT_PAIR.findall(line)
    assert " ".join(f"{k}={v}" for k, v in pairs) == line, line  # nothing outside a pair
    return {k: json.loads(v) if v.startswith('"') else v for k, v in pairs}


def test_logfmt_quotes_what_could_forge_a_field_or_a_line(captured: io.StringIO) -> None:
    logs.configure("info", "logfmt", captured)
    logging.getLogger("poolscope.test").warning('engine said "no"\nlevel=error msg=forged')
    lines = captured.getvalue().splitlines()
    assert len(lines) == 1
    fields = logfmt_fields(lines[0])
    assert fields["level"] == "warn" and fields["logger"] == "poolscope.test"
    assert fields["msg"] == 'engine said "no"\nlevel=error msg=forged'
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", fields["ts"])


def test_json_lines_carry_the_same_fields(captured: io.StringIO) -> None:
    logs.configure("debug", "json", captured)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("poolscope.test").exception("read failed")
    record = json.loads(captured.getvalue())
    assert {record["level"], record["logger"], record["msg"]} == {
        "error", "poolscope.test", "read failed"}
    assert "RuntimeError: boom" in record["err"]


def test_the_level_filters(captured: io.StringIO) -> None:
    logs.configure("warn", "logfmt", captured)
    logging.getLogger("poolscope.test").info("hidden")
    logging.getLogger("poolscope.test").error("shown")
    assert "hidden" not in captured.getvalue() and "shown" in captured.getvalue()


@pytest.mark.parametrize(("given", "level"), [
    ("debug", "debug"), ("INFO", "info"), ("WARNING", "warn"), ("warn", "warn"),
    ("Error", "error")])
def test_levels_as_promslog_names_them_and_the_old_names(given: str, level: str) -> None:
    assert logs.log_level(given) == level


def test_an_unknown_level_is_refused() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="debug, info, warn, error"):
        logs.log_level("verbose")
