"""The demo Proxy's command line."""

from __future__ import annotations

import pytest

from deploy.demo.proxy import EXPORTER, create_app, main, parse_args
from deploy.demo.proxy_select import Strategy
from poolscope.contract.thresholds import FORGET_AFTER_S


def test_flags_parse_into_the_documented_config() -> None:
    args = parse_args(["--proxy-id", "p", "--listen", "127.0.0.1:8001",
                       "--strategy", "least_inflight", "--prepare-workers", "2",
                       "--prepare-capacity", "3", "--ready-capacity", "4",
                       "--queue-timeout", "1.5", "--prepare-ms-mean", "0",
                       "--heartbeat-timeout", "2"])
    assert args.listen == ("127.0.0.1", 8001)
    assert args.strategy is Strategy.LEAST_INFLIGHT
    assert (args.prepare_workers, args.prepare_capacity, args.ready_capacity) == (2, 3, 4)
    assert (args.queue_timeout, args.prepare_ms_mean, args.heartbeat_timeout) == (1.5, 0, 2)


@pytest.mark.parametrize("bad", [
    ["--listen", "127.0.0.1:65536"],
    ["--listen", "127.0.0.1:80x"],
    ["--listen", "127.0.0.1:1", "--strategy", "random"],
    ["--listen", "127.0.0.1:1", "--prepare-workers", "0"],
    ["--listen", "127.0.0.1:1", "--queue-timeout", "0"],
    ["--listen", "127.0.0.1:1", "--prepare-ms-mean", "-1"],
])
def test_bad_flags_exit_with_usage(bad: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--proxy-id", "p", *bad])
    assert exited.value.code == 2


def test_forget_after_defaults_to_the_threshold_and_reaches_the_registry() -> None:
    assert parse_args(["--proxy-id", "p", "--listen", "127.0.0.1:1"]).forget_after == FORGET_AFTER_S
    args = parse_args(["--proxy-id", "p", "--listen", "127.0.0.1:1", "--heartbeat-timeout", "2",
                       "--forget-after", "2.5"])
    app = create_app("p", heartbeat_timeout=args.heartbeat_timeout,
                     forget_after=args.forget_after)
    assert app[EXPORTER].instances.forget_after == 2.5


@pytest.mark.parametrize("bad", [
    ["--forget-after", "soon"],
    ["--forget-after", "0"],
    ["--forget-after", "-5"],
    ["--forget-after", "nan"],
    ["--forget-after", "inf"],
    ["--forget-after", "10"],  # not longer than the default heartbeat timeout
    ["--heartbeat-timeout", "30", "--forget-after", "20"],
    ["--heartbeat-timeout", "900"],  # the default bound is no longer longer
])
def test_a_bad_forget_after_exits_2_with_one_line_naming_it(
        bad: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--proxy-id", "p", "--listen", "127.0.0.1:1", *bad])
    assert exited.value.code == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("python -m deploy.demo.proxy: error: argument --forget-after: "), line
