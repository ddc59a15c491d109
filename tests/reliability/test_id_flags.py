"""Ids outside the one charset every service shares are refused where they enter.

An id a console script accepted was published as a label and then only partly
served: the bridges refuse it in a URL, and a non-UTF-8 one (argv bytes that
Python hands over as surrogate escapes) failed every /metrics page with a 500
while /healthz said 200. Each script that takes an id refuses it at start-up
instead: exit 2 and one line that names the flag.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence

import pytest

from poolscope.exporters.instance.__main__ import main as instance_exporter
from poolscope.exporters.instance.config import parse as parse_instance
from poolscope.exporters.proxy.__main__ import main as proxy_exporter
from poolscope.exporters.proxy.__main__ import parse as parse_proxy
from poolscope.proxy_bridge.__main__ import build_parser as proxy_bridge_parser
from poolscope.proxy_bridge.__main__ import main as proxy_bridge
from poolscope.service.identity import ID_RULE

Main = Callable[[Sequence[str] | None], int]
Parse = Callable[[Sequence[str]], object]

NON_UTF8 = b"inst-\xff"
BAD_IDS = {
    "non-utf8": os.fsdecode(NON_UTF8),  # what Python makes of those argv bytes
    "space": "a b",
    "quote": 'x"y',
    "129-chars": "a" * 129,
    "empty": "",
    "dots": "..",  # a path segment a URL resolves away
}
LONGEST = "hp_127.0.0.1:8001-a." + "a" * 108  # every character class, 128 in all


def _proxy_bridge_parse(argv: Sequence[str]) -> object:
    return proxy_bridge_parser().parse_args(argv)


# Each script, its flag parsing alone, the id flag under test, and the rest of a
# minimal argv around it.
ID_FLAGS: dict[str, tuple[Main, Parse, str, list[str]]] = {
    "instance-exporter--instance-id": (instance_exporter, parse_instance, "--instance-id",
                                       ["--proxy-id", "p-1"]),
    "instance-exporter--proxy-id": (instance_exporter, parse_instance, "--proxy-id",
                                    ["--instance-id", "i-1"]),
    "proxy-exporter--proxy-id": (proxy_exporter, parse_proxy, "--proxy-id", [
        "--gateway", "llmgw", "--gateway-metrics-url", "http://127.0.0.1:9/metrics"]),
    "proxy-bridge--proxy-id": (proxy_bridge, _proxy_bridge_parse, "--proxy-id", [
        "--prometheus-url", "http://127.0.0.1:9"]),
}


@pytest.fixture
def taken_listen() -> Iterator[str]:
    """A --listen value whose port is held here: a script that accepted the id
    would exit 1 at once, where it cannot bind, instead of serving."""
    with socket.create_server(("127.0.0.1", 0)) as held:
        yield f"127.0.0.1:{held.getsockname()[1]}"


def refusal(main: Main, argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """The exit code and stderr of a script refusing `argv` before it starts."""
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own error path
        code = e.code if isinstance(e.code, int) else 1
    return code, capsys.readouterr().err


@pytest.mark.parametrize("bad", BAD_IDS)
@pytest.mark.parametrize("script", ID_FLAGS)
def test_a_bad_id_is_refused_at_start_up_in_one_line_naming_the_flag(
        script: str, bad: str, taken_listen: str, capsys: pytest.CaptureFixture[str]) -> None:
    main, _, flag, rest = ID_FLAGS[script]
    code, err = refusal(main, [flag, BAD_IDS[bad], *rest, "--listen", taken_listen], capsys)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and flag in lines[0] and ID_RULE in lines[0], err


@pytest.mark.parametrize("script", ID_FLAGS)
def test_the_longest_id_of_every_allowed_character_is_accepted(script: str) -> None:
    _, parse, flag, rest = ID_FLAGS[script]
    assert len(LONGEST) == 128
    parse([flag, LONGEST, *rest])  # raises on a refusal


@pytest.mark.parametrize("flag", ["--instance-id", "--proxy-id"])
def test_instance_exporter_process_refuses_non_utf8_id_bytes(flag: str, taken_listen: str) -> None:
    ids = {"--instance-id": b"i-1", "--proxy-id": b"p-1", flag: NON_UTF8}
    argv = [sys.executable.encode(), b"-m", b"poolscope.exporters.instance",
            b"--listen", taken_listen.encode(),
            *(b for name, value in ids.items() for b in (name.encode(), value))]
    result = subprocess.run(argv, capture_output=True, timeout=60)
    lines = result.stderr.decode(errors="replace").strip().splitlines()
    assert result.returncode == 2, lines
    assert len(lines) == 1 and flag in lines[0] and "\\udcff" in lines[0], lines
