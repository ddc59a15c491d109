"""The demo Proxy's command line."""

from __future__ import annotations

import pytest

from deploy.demo.proxy import main, parse_args
from deploy.demo.proxy_select import Strategy


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
