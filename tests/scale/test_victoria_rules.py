"""Every rule of rules/ evaluates on a real VictoriaMetrics holding a pool whose rollups
changed `source` a minute ago.

VictoriaMetrics 1.79 (Debian's, what `make setup` installs) matches a series in a
one-to-one comparison even when its last sample is minutes older than the lookback
(arithmetic drops it first): a membership count that was `source="self_declared"`
until the Proxy's registry was first scraped then stands next to its new self, and
the comparing rule fails with "duplicate time series" for every pool at once
(seen: both pools' freshness and `complete` gone for over 90 s in
tests/scale/test_backends_agree.py). Prometheus matches only what its lookback holds.
docs/scaling.md, "Differences", has the row.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from deploy.demo.processes import ProcessGroup, port_or_free, wait_ready
from harness.polling import eventually
from harness.prometheus import binary
from harness.stacks import vm_flags
from tests.support.rules import every_rule

pytestmark = pytest.mark.integration

POOL = "pool-1"
# Labels enough for the rules' selectors on raw series to find something.
RAW_LABELS = {"proxy_id": POOL, "instance_id": "i-1", "collector": "host"}
NOW_AGO_S, BEFORE_AGO_S = 1, 60  # the current samples, and the previous label set's
STEP = "300s"  # what vmalert sends by default (-datasource.queryStep)


def series(rules: list[dict[str, Any]], at_s: float) -> list[dict[str, Any]]:
    """Import lines for VictoriaMetrics: every raw input `rules` read, and every rollup
    they record, at 1 each; a rollup whose record does not fix its `source` also has
    its previous label set, BEFORE_AGO_S older, as after a change of source."""
    now_ms, before_ms = int((at_s - NOW_AGO_S) * 1000), int((at_s - BEFORE_AGO_S) * 1000)
    lines = []
    every_expr = " ".join(rule["expr"] for rule in rules)
    for name in sorted(set(re.findall(r"\bpoolscope_[a-z_]+", every_expr))):
        lines.append(({"__name__": name, **RAW_LABELS}, now_ms))
    for rule in rules:
        if "record" not in rule:
            continue
        labels = {"__name__": rule["record"], "proxy_id": POOL, **rule.get("labels", {})}
        if "source" in labels:
            lines.append((labels, now_ms))
        else:
            lines.append(({**labels, "source": "now"}, now_ms))
            lines.append(({**labels, "source": "before"}, before_ms))
    return [{"metric": metric, "values": [1], "timestamps": [ms]} for metric, ms in lines]


def query(url: str, expr: str, at_s: float) -> dict[str, Any]:
    """An instant query as vmalert asks it; the JSON answer, an error's included."""
    params = urllib.parse.urlencode({"query": expr, "time": f"{at_s:.3f}", "step": STEP,
                                     "nocache": "1"})
    try:
        with urllib.request.urlopen(f"{url}/api/v1/query?{params}", timeout=10) as r:
            answer: dict[str, Any] = json.load(r)
    except urllib.error.HTTPError as e:
        answer = json.loads(e.read())
    return answer


@pytest.fixture(scope="module")
def victoria(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("victoria")
    group = ProcessGroup(workdir)
    port = port_or_free(0)
    url = f"http://127.0.0.1:{port}"
    try:
        # deploy/'s flags (its lookback included), on a free port and a fresh directory.
        vm = group.start("victoria-metrics", [binary("victoria-metrics"), *vm_flags(
            "victoria-metrics", {"-httpListenAddr": f"127.0.0.1:{port}",
                                 "-storageDataPath": str(workdir / "data")})])
        wait_ready(f"{url}/health", vm)
        yield url
    finally:
        group.stop()


def test_no_rule_fails_after_a_rollup_changed_its_source(victoria: str) -> None:
    rules, at = every_rule(), round(time.time(), 3)
    lines = series(rules, at)
    body = "\n".join(json.dumps(line) for line in lines).encode()
    urllib.request.urlopen(urllib.request.Request(f"{victoria}/api/v1/import", body),
                           timeout=10).close()
    current = sum(1 for line in lines if line["metric"].get("source") != "before")
    # Imported rows become searchable within a few seconds.
    eventually(lambda: query(victoria, 'count({__name__=~".+"})', at),
               lambda a: a.get("data", {}).get("result")
               and a["data"]["result"][0]["value"][1] == str(current), 60,
               "every current series searchable")
    # The previous label sets are past the lookback: plain reads do not see them...
    assert query(victoria, 'proxy_pool:instances:count{source="before"}', at)["data"][
        "result"] == []
    answers = [(rule.get("record") or rule["alert"], query(victoria, rule["expr"], at))
               for rule in rules]
    failed = [(name, a.get("error")) for name, a in answers if a["status"] != "success"]
    assert failed == []
    # ...and the rules that match on them still answer, from the current ones alone.
    for record in ("proxy_pool:resource_freshness_seconds:max", "proxy_pool:load:ratio",
                   "proxy_pool:instances_missing_resource:count"):
        result = dict(answers)[record]["data"]["result"]
        assert [s["metric"]["proxy_id"] for s in result] == [POOL], record
