"""A command's flags refused at start-up: what every CLI promises for a bad value."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest


def refused(parse_args: Callable[[Sequence[str]], object], argv: Sequence[str],
            capsys: pytest.CaptureFixture[str]) -> str:
    """What `parse_args(argv)` wrote to stderr, once it exited 2 (a usage error)."""
    with pytest.raises(SystemExit) as exited:
        parse_args(argv)
    assert exited.value.code == 2
    return capsys.readouterr().err
