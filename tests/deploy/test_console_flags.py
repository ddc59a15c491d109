"""Every console script refuses every bad flag value at start-up.

The scripts are read from pyproject.toml, so a new one is covered as soon as it is
installable, and the options from each script's own parser (`build_parser()` in the
module its entry point names), so a new option is covered as soon as it exists. Each
option gets the bad values of its type; a type with no entry below fails the test,
so no flag is added that takes any string. Each case runs the real `main()` in its
own process (forked from one per script, which pays for the imports once) and must
exit 2 with one line on stderr that names the flag.

    python -m tests.deploy.test_console_flags < cases.json   # the per-script runner
"""

from __future__ import annotations

import argparse
import importlib
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypedDict

import pytest

from harness.prometheus import REPO
from poolscope.contract.thresholds import FRESH_S
from poolscope.exporters.common.sampling import sample_interval
from poolscope.scheduler_bridge.status.cli import watch_interval
from poolscope.service.argtypes import (
    http_url,
    identifier,
    label_name,
    non_negative_float,
    parse_listen,
    positive_float,
    positive_int,
    ratio,
)
from poolscope.service.logs import log_level
from poolscope.service.web import telemetry_path
from tests.deploy.clis import console_scripts

BAD: dict[Callable[[str], Any], tuple[str, ...]] = {
    positive_float: ("0", "-1", "nan", "inf", "soon"),
    non_negative_float: ("-1", "nan", "inf", "-inf", "soon"),
    positive_int: ("0", "-3", "1.5", "many"),
    ratio: ("-0.1", "1.5", "nan"),
    sample_interval: ("0", "nan", f"{FRESH_S + 1:g}"),
    watch_interval: ("0.1", "7200", "nan"),
    identifier: ("", "a b", 'x"y', "a" * 129, "\u00e9"),
    label_name: ("", "1pool", "pool-name", "__name__"),
    http_url: ("localhost:9090", "ftp://host/", "http:///metrics", "http://host:99999/",
               "http://host:0/"),
    parse_listen: ("nowhere", "127.0.0.1:0", "127.0.0.1:65536", "[::zz]:80"),
    telemetry_path: ("metrics", "/", "/a b", "//metrics", "/metrics?x=1", "/healthz",
                     "/v1/resource/snapshot", "/debug/pool_resource", "/./metrics",
                     "/x/../healthz"),
    log_level: ("verbose", "", "5"),
    # Read when the command starts (the token, the TLS pair), not by argparse.
    Path: ("/nonexistent/poolscope-flag-test", "/"),
}
BAD_CHOICE = "not-a-choice"
# What a required option gets while another one is under test.
GOOD: dict[Callable[[str], Any], str] = {
    identifier: "p-1",
    http_url: "http://127.0.0.1:9",
}
# Set whenever a script has them: a bad value accepted by mistake then ends at once
# (the listen port is held here; nothing answers on port 9), instead of serving.
HARMLESS = {"--bridge-url": "http://127.0.0.1:9"}

# Checks across flags, per script: the extra argv, and the flags the line must name.
CROSS: dict[str, list[tuple[list[str], tuple[str, ...]]]] = {
    "poolscope-instance-exporter": [
        (["--admission-kv-degraded=0.9", "--admission-kv-saturated=0.5"], ("--admission-",)),
        (["--tls-cert=/nonexistent.pem"], ("--tls-cert", "--tls-key")),
        (["--collector.engine"], ("--collector.engine", "--engine-metrics-url")),
        (["--no-collector.host"], ("--no-collector.host",)),
    ],
    "poolscope-proxy-exporter": [
        (["--pool-label=pool"], ("--pool-label", "--proxy-id")),
    ],
    "poolscope-scheduler-bridge": [
        (["--stale-after=10", "--fresh-for=15"], ("--stale-after", "--fresh-for")),
        (["--evaluation-interval=20"], ("--evaluation-interval", "--fresh-for")),
        (["--tls-key=/nonexistent.pem"], ("--tls-cert", "--tls-key")),
    ],
    "poolscope-proxy-bridge": [
        (["--stale-after=0", "--fresh-for=1"], ("--stale-after", "--fresh-for")),
    ],
    "poolscope-status": [
        (["--count=2"], ("--count", "--watch")),
    ],
}
CASE_TIMEOUT_S = 60.0  # generous: only a script that accepted a bad value runs this long


class Outcome(TypedDict):
    argv: list[str]
    code: int | None
    stderr: str


def flag(action: argparse.Action) -> str:
    return max(action.option_strings, key=len)


def parser_of(entry: str) -> argparse.ArgumentParser:
    module = importlib.import_module(entry.partition(":")[0])
    build = getattr(module, "build_parser", None)
    if build is None:
        raise AssertionError(f"{entry}: its module offers no build_parser()")
    parser: argparse.ArgumentParser = build()
    return parser


def valued(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and a.nargs != 0]


def bad_values(action: argparse.Action) -> tuple[str, ...]:
    if action.choices is not None:
        return (BAD_CHOICE,)
    if action.type not in BAD:
        raise AssertionError(
            f"{flag(action)} takes a value of type {action.type!r}, which has no bad values "
            "here: give it a validating type from poolscope.service.argtypes, and an entry in BAD")
    return BAD[action.type]


def good_value(action: argparse.Action) -> str:
    if action.choices is not None:
        return str(next(iter(action.choices)))
    if action.type not in GOOD:
        raise AssertionError(f"required {flag(action)} needs a value in GOOD")
    return GOOD[action.type]


def base_argv(parser: argparse.ArgumentParser, listen: str,
              tested: argparse.Action | None = None) -> list[str]:
    """The smallest argv the script accepts, without the option under test: every
    required option, one option of each required group it is not in, and the
    harmless values."""
    groups = parser._mutually_exclusive_groups
    grouped = {id(a) for g in groups for a in g._group_actions}
    needed = [a for a in parser._actions if a.required and id(a) not in grouped]
    needed += [g._group_actions[0] for g in groups
               if g.required and all(a is not tested for a in g._group_actions)]
    argv = [f"{flag(a)}={good_value(a)}" for a in needed if a is not tested]
    harmless = {**HARMLESS, "--web.listen-address": listen}
    present = {flag(a) for a in valued(parser)}
    tested_flag = flag(tested) if tested is not None else None
    argv += [f"{name}={value}" for name, value in harmless.items()
             if name in present and name != tested_flag]
    return argv


def bad_flag_cases(parser: argparse.ArgumentParser,
                   listen: str) -> list[tuple[list[str], tuple[str, ...]]]:
    return [([*base_argv(parser, listen, action), f"{flag(action)}={value}"], (flag(action),))
            for action in valued(parser) for value in bad_values(action)]


@pytest.fixture(scope="module")
def held_listen() -> Iterator[str]:
    """A --listen value whose port is held here: a script that accepted a bad value
    exits 1 at once, where it cannot bind, instead of serving."""
    with socket.create_server(("127.0.0.1", 0)) as held:
        yield f"127.0.0.1:{held.getsockname()[1]}"


def run_cases(script: str, entry: str, cases: list[list[str]]) -> list[Outcome]:
    """Each argv through the real script, each in a process of its own."""
    request = json.dumps({"script": script, "entry": entry, "cases": cases})
    result = subprocess.run([sys.executable, "-m", "tests.deploy.test_console_flags"],
                            input=request, capture_output=True, text=True, cwd=REPO,
                            timeout=CASE_TIMEOUT_S + 120)
    assert result.returncode == 0, result.stderr
    outcomes: list[Outcome] = json.loads(result.stdout)
    return outcomes


def refusal_problems(outcome: Outcome, names: tuple[str, ...]) -> str | None:
    """Why this outcome is not a start-up refusal naming `names`; None when it is."""
    lines = outcome["stderr"].strip().splitlines()
    if outcome["code"] != 2:
        return f"exit {outcome['code']}, not 2: {lines[-3:]}"
    if len(lines) != 1:
        return f"{len(lines)} lines on stderr, not one: {lines}"
    missing = [n for n in names if n not in lines[0]]
    if ": error: " not in lines[0] or missing:
        return f"the line does not name {missing or 'an error'}: {lines[0]}"
    return None


def check_all(checks: dict[str, list[tuple[list[str], tuple[str, ...]]]]) -> None:
    """Run every script's cases at once; fail with every case that was not refused."""
    scripts = console_scripts()
    with ThreadPoolExecutor(max_workers=len(checks)) as pool:
        results = {script: pool.submit(run_cases, script, scripts[script],
                                       [argv for argv, _ in cases])
                   for script, cases in checks.items()}
        failures = [f"{script} {' '.join(argv)}: {problem}"
                    for script, cases in checks.items()
                    for (argv, names), outcome in zip(cases, results[script].result(),
                                                      strict=True)
                    if (problem := refusal_problems(outcome, names)) is not None]
    assert not failures, "\n".join(failures)


def test_every_option_that_takes_a_value_has_bad_values() -> None:
    problems = []
    for script, entry in console_scripts().items():
        try:
            actions = valued(parser_of(entry))
        except AssertionError as e:
            problems.append(str(e))
            continue
        for action in actions:
            try:
                bad_values(action)
            except AssertionError as e:
                problems.append(f"{script}: {e}")
    assert not problems, "\n".join(problems)


def test_every_console_script_refuses_every_bad_flag_value(held_listen: str) -> None:
    check_all({script: bad_flag_cases(parser_of(entry), held_listen)
               for script, entry in console_scripts().items()})


def test_contradicting_flags_are_refused_naming_both(held_listen: str) -> None:
    assert set(CROSS) <= set(console_scripts())
    check_all({script: [([*base_argv(parser_of(console_scripts()[script]), held_listen),
                          *extra], names) for extra, names in cases]
               for script, cases in CROSS.items()})


# --- the per-script runner (python -m tests.deploy.test_console_flags) ------------

def _case(entry: str, script: str, argv: list[str], stderr_path: str) -> None:
    """A console script's run, as its entry point runs it: argv in sys.argv, and
    sys.exit(main()); multiprocessing turns the SystemExit into the exit status."""
    module, _, name = entry.partition(":")
    main = getattr(importlib.import_module(module), name)
    os.dup2(os.open(stderr_path, os.O_WRONLY), 2)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    sys.argv = [script, *argv]
    sys.exit(main())


def _run(request: dict[str, Any]) -> list[Outcome]:
    importlib.import_module(request["entry"].partition(":")[0])  # once, before the forks
    context = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory() as tmp:
        started = []
        for i, argv in enumerate(request["cases"]):
            path = os.path.join(tmp, f"{i}.err")
            Path(path).touch()
            process = context.Process(target=_case,
                                      args=(request["entry"], request["script"], argv, path))
            process.start()
            started.append((argv, path, process))
        outcomes: list[Outcome] = []
        deadline = time.monotonic() + CASE_TIMEOUT_S
        for argv, path, process in started:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join()
                stderr = f"still running after {CASE_TIMEOUT_S:g} s: the value was accepted"
                outcomes.append({"argv": argv, "code": None, "stderr": stderr})
                continue
            outcomes.append({"argv": argv, "code": process.exitcode,
                             "stderr": Path(path).read_text(errors="replace")})
    return outcomes


if __name__ == "__main__":
    print(json.dumps(_run(json.load(sys.stdin))))
