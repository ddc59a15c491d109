"""deploy/alertmanager/alertmanager.yml, the example config docs/operating.md runs:
amtool accepts it, every severity the rules use reaches the receiver its comment
promises, and its inhibit rule silences a pool's lesser alerts under that pool's
critical one only, in a real Alertmanager."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.alertmanager import running_alertmanager
from tests.support.polling import eventually
from tests.support.prometheus import REPO, RULE_FILES, binary

EXAMPLE = REPO / "deploy" / "alertmanager" / "alertmanager.yml"
RECEIVERS = {"critical": "page", "warning": "page", "info": "low-noise"}


def _amtool(*args: str, cwd: Path | None = None) -> str:
    done = subprocess.run([binary("amtool"), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_amtool_accepts_it_from_another_directory(tmp_path: Path) -> None:
    assert "SUCCESS" in _amtool("check-config", str(EXAMPLE), cwd=tmp_path)


@pytest.mark.parametrize(("severity", "receiver"), RECEIVERS.items())
def test_each_severity_reaches_its_receiver(severity: str, receiver: str) -> None:
    found = _amtool("config", "routes", "test", f"--config.file={EXAMPLE}",
                    "alertname=PoolscopeExample", f"severity={severity}", "proxy_id=pool-1")
    assert found.strip() == receiver


def test_every_severity_the_rules_use_is_routed() -> None:
    """A new severity in rules/ would fall through to the default receiver unnoticed."""
    used = {rule["labels"]["severity"] for path in RULE_FILES
            for group in yaml.safe_load(path.read_text())["groups"]
            for rule in group["rules"] if "alert" in rule}
    assert used and used <= RECEIVERS.keys()


def _alert(name: str, severity: str, proxy_id: str | None) -> dict[str, dict[str, str]]:
    labels = {"alertname": name, "severity": severity}
    return {"labels": labels | ({"proxy_id": proxy_id} if proxy_id else {})}


def test_a_pools_critical_inhibits_only_that_pools_lesser_alerts(tmp_path: Path) -> None:
    with running_alertmanager(tmp_path, yaml.safe_load(EXAMPLE.read_text())) as am:
        am.post([_alert("Outage", "critical", "pool-a"),
                 _alert("Symptom", "warning", "pool-a"), _alert("Idle", "info", "pool-a"),
                 _alert("Symptom", "warning", "pool-b"),
                 # Neither names a pool: an absent label must not count as the same pool.
                 _alert("Global", "critical", None), _alert("Elsewhere", "warning", None)])

        def inhibited() -> set[tuple[str, str]]:
            """(alertname, proxy_id) of the alerts inhibited, once all six are in."""
            alerts = am.alerts()
            if len(alerts) < 6:
                return {("still arriving", str(len(alerts)))}
            return {(a["labels"]["alertname"], a["labels"].get("proxy_id", ""))
                    for a in alerts if a["status"]["inhibitedBy"]}

        expected = {("Symptom", "pool-a"), ("Idle", "pool-a")}
        eventually(inhibited, expected.__eq__, 30, "only pool-a's lesser alerts inhibited")
