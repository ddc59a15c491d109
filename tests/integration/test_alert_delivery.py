"""An alert from rules/ reaches the person on call, and so does its resolution.

`promtool test rules` (tests/rules/) proves each alert's expression and `for:`; this
proves the rest of the path an operator relies on: a real Prometheus evaluating the
rule files against a real Instance exporter, a real Alertmanager, and a webhook
receiver this test runs. The fault is the simplest one there is, the exporter
stopped, so what is tested is the delivery: labels, annotations, firing after the
`for:` and resolved only once the exporter is back.

The alert windows are shortened (ALERT_DOWN_S = 5 s instead of minutes, the alert
groups evaluated every second like the rollups) by rendering the real template with
those thresholds changed; the recording rules are the committed files.

Prometheus' resend delay stays at its default on purpose: it only spaces repeats of
a firing alert (the first send and the resolution go out at once), and Prometheus
tells Alertmanager an alert is valid for four resend delays, so a short one would
let Alertmanager resolve the alert by itself on a busy machine, before the exporter
is back.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from deploy.demo.processes import ProcessGroup, wait_ready
from rules.render import current, substitute
from tests.support.alertmanager import (
    Delivery,
    Webhook,
    delivering_to,
    running_alertmanager,
    webhook_receiver,
)
from tests.support.polling import eventually
from tests.support.prometheus import (
    REPO,
    RULE_FILES,
    Prometheus,
    free_port,
    running_prometheus,
    scrape_config,
)

pytestmark = pytest.mark.integration

TEMPLATE = REPO / "rules" / "src" / "alerts.yml"
ALERT = "PoolscopeInstanceExporterDown"
DOWN_S = 5.0
SHORTENED = {"ALERT_DOWN_S": DOWN_S, "ALERT_INTERVAL_S": 1.0}
PROXY_ID, INSTANCE_ID = "pool-alerts", "replica-7"  # neither names the other
RUNBOOK = ("https://github.com/poolscope/poolscope/blob/main/docs/runbooks.md"
           "#poolscopeinstanceexporterdown")
# Generous: a scrape, DOWN_S, an evaluation, group_wait, on two slow cores shared by
# four test workers. A bound on a hang, not a speed measurement.
DELIVERY_TIMEOUT_S = 120.0


def rule_files(workdir: Path) -> list[Path]:
    """The committed rule files, with the alerts rendered again with SHORTENED."""
    alerts = workdir / TEMPLATE.name
    alerts.write_text(substitute(TEMPLATE.read_text(), {**current(), **SHORTENED}))
    return [*(p for p in RULE_FILES if p.name != TEMPLATE.name), alerts]


@dataclass
class Stack:
    prometheus: Prometheus
    webhook: Webhook
    exporters: ProcessGroup
    exporter: str  # host:port, kept across the restart

    def start_exporter(self, name: str) -> None:
        child = self.exporters.start_python(
            name, "poolscope.exporters.instance", "--instance-id", INSTANCE_ID,
            "--proxy-id", PROXY_ID, "--listen", self.exporter)
        wait_ready(f"http://{self.exporter}/healthz", child)

    def delivered(self, status: str) -> Delivery:
        """Wait for the first `status` notification of ALERT; that one."""
        return eventually(lambda: self.webhook.deliveries(ALERT, status), bool,
                          DELIVERY_TIMEOUT_S, f"a {status} {ALERT} notification",
                          every=0.25)[0]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    exporters = ProcessGroup(tmp_path)
    exporter = f"127.0.0.1:{free_port()}"
    # The target labels the deployed file_sd targets carry (deploy/prometheus/targets/).
    job = scrape_config("poolscope-instance", [exporter],
                        labels={"proxy_id": PROXY_ID, "instance_id": INSTANCE_ID})
    try:
        with webhook_receiver() as webhook, \
                running_alertmanager(tmp_path / "alertmanager",
                                     delivering_to(webhook.url)) as am, \
                running_prometheus(tmp_path / "prometheus", [job], rule_files(tmp_path),
                                   alertmanagers=[am.address]) as prom:
            stack = Stack(prom, webhook, exporters, exporter)
            stack.start_exporter("exporter")
            yield stack
    finally:
        exporters.stop()


def test_exporter_down_is_delivered_and_resolved(stack: Stack) -> None:
    stack.prometheus.wait_for(f'up{{instance_id="{INSTANCE_ID}"}} == 1')
    assert stack.webhook.deliveries(ALERT) == []  # nothing fires on a healthy exporter

    stopped_at = time.monotonic()  # Delivery.received_at's clock; no scrape fails before
    stack.exporters.stop_child("exporter")
    fired = stack.delivered("firing")
    assert fired.received_at - stopped_at >= DOWN_S, "fired before its `for:` elapsed"
    assert {k: fired.labels.get(k) for k in ("alertname", "severity", "proxy_id",
                                             "instance_id")} == {
        "alertname": ALERT, "severity": "warning", "proxy_id": PROXY_ID,
        "instance_id": INSTANCE_ID}
    assert fired.annotations["summary"]
    assert PROXY_ID in fired.annotations["description"]
    assert INSTANCE_ID in fired.annotations["description"]
    assert fired.annotations["runbook_url"] == RUNBOOK

    restarted_at = time.monotonic()
    stack.start_exporter("exporter-restarted")
    resolved = stack.delivered("resolved")
    assert resolved.received_at > restarted_at, "resolved while the exporter was still down"
    assert resolved.labels == fired.labels
