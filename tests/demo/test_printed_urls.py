"""What `make demo` prints: every page it serves, each pool's drill-down among them."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy.demo.cluster import Cluster, Pool, print_urls
from deploy.demo.processes import ProcessGroup


def test_each_pool_s_status_page_and_cli_line_are_printed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pools = tuple(Pool(f"pool-{i}", f"http://127.0.0.1:{20 + i}", (f"http://127.0.0.1:{30 + i}",),
                       f"http://127.0.0.1:{40 + i}") for i in (1, 2))
    print_urls(Cluster(tmp_path, "http://127.0.0.1:9", "http://127.0.0.1:10", pools,
                       ProcessGroup(tmp_path)))
    out = capsys.readouterr().out
    assert "http://127.0.0.1:10/status " in out
    for pool in ("pool-1", "pool-2"):
        assert f"http://127.0.0.1:10/status/pools/{pool} " in out
        assert f"poolscope-status --bridge-url http://127.0.0.1:10 {pool})" in out
