"""Every shipped config scrapes and evaluates at the interval the thresholds assume.

The rules' freshness and rate-coverage bounds are written for SCRAPE_INTERVAL_S; a
config that scraped slower would make every fresh sample look stale, so a config and
the thresholds change together or a test says which one was left behind.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from poolscope.contract.thresholds import (
    ALERT_INTERVAL_S,
    ALERT_MEMORY_INTERVAL_S,
    ERROR_RATES_INTERVAL_S,
    SCRAPE_INTERVAL_S,
)

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
CONFIGS = [*DEPLOY.glob("prometheus/*.yml"), *DEPLOY.glob("federation/*.yml"),
           *DEPLOY.glob("victoriametrics/*.yml"), *DEPLOY.glob("kubernetes/*monitor*.yaml")]
PROMETHEUS_RULE = DEPLOY / "kubernetes" / "prometheusrule.yaml"
INTERVAL = re.compile(
    r"^\s*(?:(?:scrape_interval|evaluation_interval|interval):\s*|- -evaluationInterval=)(\S+)",
    re.M)


def _seconds(duration: str) -> float:
    value, unit = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m)", duration).groups()  # type: ignore[union-attr]
    return float(value) * {"ms": 0.001, "s": 1.0, "m": 60.0}[unit]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_intervals_match_the_thresholds(config: Path) -> None:
    found = INTERVAL.findall(config.read_text())
    assert found, f"{config} sets no interval"
    assert {_seconds(d) for d in found} == {SCRAPE_INTERVAL_S}


def test_the_prometheus_rule_evaluates_rollups_and_alerts_at_their_intervals() -> None:
    """The rollups at the scrape interval; the alert groups, whose windows are minutes, at
    ALERT_INTERVAL_S; the rates the burn-rate alerts average over hours, at
    ERROR_RATES_INTERVAL_S; what the alerts remember of each pool for hours, at
    ALERT_MEMORY_INTERVAL_S."""
    groups = yaml.safe_load(PROMETHEUS_RULE.read_text())["spec"]["groups"]
    for group in groups:
        alerts = any("alert" in r for r in group["rules"])
        expected = (ALERT_INTERVAL_S if alerts
                    else ERROR_RATES_INTERVAL_S if group["name"] == "poolscope.alerts.users.rates"
                    else ALERT_MEMORY_INTERVAL_S if group["name"] == "poolscope.alerts.memory"
                    else SCRAPE_INTERVAL_S)
        assert _seconds(group["interval"]) == expected, group["name"]
    assert any("alert" in r for g in groups for r in g["rules"])
