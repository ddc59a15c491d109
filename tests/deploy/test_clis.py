"""The argv checker itself: it must reject what the services reject, or every
deploy test built on it would pass vacuously."""

from __future__ import annotations

import pytest

from tests.deploy.clis import PARSERS, BadArguments, check_command, console_scripts

GOOD = {
    "poolscope-instance-exporter": ["--instance-id=i", "--proxy-id=p"],
    "poolscope-scheduler-bridge": ["--prometheus-url=http://127.0.0.1:9090"],
    "poolscope-proxy-bridge": ["--proxy-id=p", "--prometheus-url=http://127.0.0.1:9090"],
}


def test_every_parser_is_a_console_script() -> None:
    assert set(PARSERS) <= set(console_scripts())
    assert set(GOOD) == set(PARSERS)


@pytest.mark.parametrize("script", sorted(GOOD))
def test_accepts_minimal_argv(script: str) -> None:
    check_command([f"/opt/poolscope/bin/{script}", *GOOD[script]])


@pytest.mark.parametrize("script", sorted(GOOD))
def test_rejects_unknown_flag(script: str) -> None:
    with pytest.raises(BadArguments, match="--no-such-flag"):
        check_command([script, *GOOD[script], "--no-such-flag"])


@pytest.mark.parametrize("script", sorted(GOOD))
def test_rejects_bad_listen(script: str) -> None:
    with pytest.raises(BadArguments, match="listen"):
        check_command([script, *GOOD[script], "--listen=nowhere"])


def test_rejects_unknown_program() -> None:
    with pytest.raises(BadArguments, match="console script"):
        check_command(["/usr/bin/poolscope-nope"])
    with pytest.raises(BadArguments, match="may start"):
        check_command(["poolscope-status"])
