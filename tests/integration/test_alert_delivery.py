"""An alert from rules/ reaches the person on call through the example Alertmanager
config, at the receiver its severity names, and so does its resolution; a symptom
whose cause fires reaches nobody; the Watchdog keeps arriving at its own receiver.

`promtool test rules` (tests/rules/) proves each alert's expression and `for:`, and
tests/deploy/test_alertmanager_config.py each route with amtool; this proves the rest
of the path an operator relies on: a real Prometheus evaluating the rule files
against real Instance exporters, a real Alertmanager running
deploy/alertmanager/alertmanager.yml (receivers pointed at webhooks this test runs,
timers in seconds), and what each receiver is sent. The faults are the simplest
there are: a Scheduler bridge that is not running (critical: page; its target-down
warning is the same fault and inhibited), and one of a pool's two exporters stopped
(warning: ticket; the member it leaves stale is its symptom and inhibited), then
started again (resolved).

The alert windows are shortened (ALERT_DOWN_S = 5 s and ALERT_FAILING_S = 15 s
instead of minutes, in the same order, the alert groups evaluated every second like
the rollups) by rendering the real template with those thresholds changed; the
recording rules are the committed files.

Prometheus' resend delay stays at its default on purpose: it only spaces repeats of
a firing alert (the first send and the resolution go out at once), and Prometheus
tells Alertmanager an alert is valid for four resend delays, so a short one would
let Alertmanager resolve the alert by itself on a busy machine, before the exporter
is back.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy.demo.processes import ProcessGroup, wait_ready
from harness.polling import eventually
from harness.prometheus import (
    REPO,
    RULE_FILES,
    Prometheus,
    free_port,
    running_prometheus,
    scrape_config,
)
from rules.render import current, substitute
from tests.support.alertmanager import (
    EXAMPLE,
    Alertmanager,
    Delivery,
    Webhook,
    as_example,
    running_alertmanager,
    webhook_receiver,
)

pytestmark = pytest.mark.integration

TEMPLATE = REPO / "rules" / "src" / "alerts.yml"
ALERT = "PoolscopeInstanceExporterDown"
SYMPTOM = "PoolscopePoolMembersStale"  # the member ALERT's exporter leaves stale
CRITICAL = "PoolscopeSchedulerBridgeServingNothing"
CRITICAL_SYMPTOM = "PoolscopeTargetDown"  # the same bridge, not answering its scrape
WATCHDOG = "PoolscopeWatchdog"
DOWN_S = 5.0
SHORTENED = {"ALERT_DOWN_S": DOWN_S, "ALERT_FAILING_S": 3 * DOWN_S, "ALERT_INTERVAL_S": 1.0}
PROXY_ID, INSTANCE_ID, OTHER_ID = "pool-alerts", "replica-7", "replica-8"  # none names another
RUNBOOK = ("https://github.com/poolscope/poolscope/blob/main/docs/runbooks.md"
           "#poolscopeinstanceexporterdown")
RECEIVERS = [r["name"] for r in yaml.safe_load(EXAMPLE.read_text())["receivers"]]
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
    alertmanager: Alertmanager
    receivers: dict[str, Webhook]  # by the example's receiver names
    exporters: ProcessGroup
    addresses: dict[str, str]  # instance_id -> host:port, kept across a restart

    def start_exporter(self, name: str, instance_id: str) -> None:
        start_exporter(self.exporters, self.addresses[instance_id], name, instance_id)

    def delivered(self, receiver: str, alertname: str, status: str) -> Delivery:
        """Wait for the first `status` notification of `alertname` at `receiver`."""
        return eventually(lambda: self.receivers[receiver].deliveries(alertname, status),
                          bool, DELIVERY_TIMEOUT_S,
                          f"a {status} {alertname} notification at {receiver}", every=0.25)[0]

    def receivers_of(self, alertname: str) -> set[str]:
        return {name for name, hook in self.receivers.items() if hook.deliveries(alertname)}

    def inhibited(self, alertname: str) -> dict[str, Any]:
        """Wait until Alertmanager holds `alertname` back under a cause; that alert."""
        def held() -> list[dict[str, Any]]:
            return [a for a in self.alertmanager.alerts()
                    if a["labels"]["alertname"] == alertname and a["status"]["inhibitedBy"]]
        return eventually(held, bool, DELIVERY_TIMEOUT_S, f"{alertname} inhibited")[0]


def _instance_job(addresses: dict[str, str]) -> dict[str, Any]:
    """One job, a target per Instance, labelled as deploy/prometheus/targets/ label them."""
    job = scrape_config("poolscope-instance", [])
    job["static_configs"] = [{"targets": [address],
                              "labels": {"proxy_id": PROXY_ID, "instance_id": instance_id}}
                             for instance_id, address in addresses.items()]
    return job


def start_exporter(exporters: ProcessGroup, address: str, name: str, instance_id: str) -> None:
    child = exporters.start_python(
        name, "poolscope.exporters.instance", "--instance-id", instance_id,
        "--proxy-id", PROXY_ID, "--listen", address)
    wait_ready(f"http://{address}/healthz", child)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    exporters = ProcessGroup(tmp_path)
    addresses = {i: f"127.0.0.1:{free_port()}" for i in (INSTANCE_ID, OTHER_ID)}
    # A Scheduler bridge target nothing listens on: a bridge that is not running.
    bridge = scrape_config("poolscope-scheduler-bridge", [f"127.0.0.1:{free_port()}"])
    try:
        # Up before Prometheus first scrapes them, however slowly they start: an exporter
        # still starting would count as down and fire before the case stops one.
        for instance_id, address in addresses.items():
            start_exporter(exporters, address, instance_id, instance_id)
        with ExitStack() as hooks:
            receivers = {name: hooks.enter_context(webhook_receiver()) for name in RECEIVERS}
            config = as_example({name: hook.url for name, hook in receivers.items()})
            with running_alertmanager(tmp_path / "alertmanager", config) as am, \
                    running_prometheus(tmp_path / "prometheus", [_instance_job(addresses), bridge],
                                       rule_files(tmp_path), alertmanagers=[am.address]) as prom:
                yield Stack(prom, am, receivers, exporters, addresses)
    finally:
        exporters.stop()


def test_each_severity_reaches_its_receiver_and_a_cause_holds_back_its_symptom(
        stack: Stack) -> None:
    stack.prometheus.wait_for('count(up{job="poolscope-instance"} == 1) == 2')

    # The Watchdog flows to its own receiver, again and again, and nowhere else.
    eventually(lambda: stack.receivers["watchdog"].deliveries(WATCHDOG, "firing"),
               lambda found: len(found) >= 2, DELIVERY_TIMEOUT_S, "the Watchdog, repeated")
    assert stack.receivers_of(WATCHDOG) == {"watchdog"}

    # The bridge that is not running pages; its own target-down is held back.
    paged = stack.delivered("page", CRITICAL, "firing")
    assert paged.labels["severity"] == "critical"
    assert stack.inhibited(CRITICAL_SYMPTOM)["labels"]["job"] == "poolscope-scheduler-bridge"
    assert stack.receivers_of(CRITICAL) == {"page"}
    assert stack.receivers_of(CRITICAL_SYMPTOM) == set()
    assert stack.receivers_of(ALERT) == set()  # nothing fires on a healthy exporter

    stopped_at = time.monotonic()  # Delivery.received_at's clock; no scrape fails before
    stack.exporters.stop_child(INSTANCE_ID)
    fired = stack.delivered("ticket", ALERT, "firing")
    assert fired.received_at - stopped_at >= DOWN_S, "fired before its `for:` elapsed"
    assert {k: fired.labels.get(k) for k in ("alertname", "severity", "proxy_id",
                                             "instance_id")} == {
        "alertname": ALERT, "severity": "warning", "proxy_id": PROXY_ID,
        "instance_id": INSTANCE_ID}
    assert fired.annotations["summary"]
    assert PROXY_ID in fired.annotations["description"]
    assert INSTANCE_ID in fired.annotations["description"]
    assert fired.annotations["runbook_url"] == RUNBOOK
    # The stale member it leaves fires too, and reaches nobody while its cause lasts.
    assert stack.inhibited(SYMPTOM)["labels"]["proxy_id"] == PROXY_ID

    restarted_at = time.monotonic()
    assert stack.receivers_of(SYMPTOM) == set()
    assert stack.receivers_of(ALERT) == {"ticket"}
    stack.start_exporter("restarted", INSTANCE_ID)
    resolved = stack.delivered("ticket", ALERT, "resolved")
    assert resolved.received_at > restarted_at, "resolved while the exporter was still down"
    assert resolved.labels == fired.labels
