"""What the dashboard tests read out of the committed Grafana JSON: every
query, with Grafana's template variables replaced the way Grafana would for
the demo cluster, and the metric names each query references."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dashboards import HERE
from poolscope.contract import catalog
from poolscope.contract.fields import rollup_names

REPO = HERE.parent
DASHBOARD_FILES = sorted(HERE.glob("*.json"))

# The demo cluster's pools as Grafana expands a multi-value variable with
# "All" selected, and one of its Instances. The demo's one Prometheus adds no
# region or cluster label, so those offer only "All", which sends `.*`.
DEMO_VARIABLES = {
    "region": ".*",
    "cluster": ".*",
    "proxy_id": "pool-1|pool-2",
    "instance_id": "pool-1-inst-1",
    "__rate_interval": "1m",
    "__interval": "1m",
}
_VARIABLE = re.compile(r"\$\{?(\w+)\}?")

# Series Prometheus makes itself for every target.
PROMETHEUS_OWN = frozenset({"up", "scrape_duration_seconds", "scrape_samples_scraped",
                            "scrape_samples_post_metric_relabeling", "scrape_series_added"})

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
# A token starting with a digit is a number or a duration (0.95, 2e3, 1m, 5m30s).
_TOKEN = re.compile(r"(?P<number>\d[\w.]*(?:[eE][+-]\d+)?)|(?P<ident>[A-Za-z_:][\w:]*)")
_KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "by", "without", "on",
                       "ignoring", "group_left", "group_right", "inf", "nan", "atan2"})
_LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.*),\s*(?P<label>\w+)\)$")


@dataclass(frozen=True)
class Query:
    """One panel target (or template variable) of a dashboard."""

    dashboard: str
    panel: str
    ref: str
    expr: str

    @property
    def id(self) -> str:
        return f"{self.dashboard}:{self.panel}:{self.ref}"

    def substituted(self) -> str:
        """The PromQL Grafana sends for the demo cluster; an unknown variable raises."""
        return _VARIABLE.sub(lambda m: DEMO_VARIABLES[m.group(1)], self.expr)

    @property
    def metrics(self) -> frozenset[str]:
        return metric_names(self.expr)

    @property
    def needs_gpu(self) -> bool:
        """True for queries of GPU series, which are absent on a host without GPUs."""
        return any("gpu" in name for name in self.metrics)


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, including those nested in collapsed rows."""
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def queries() -> list[Query]:
    """Every panel target of every committed dashboard."""
    return [Query(path.stem, panel["title"], target["refId"], target["expr"])
            for path in DASHBOARD_FILES for panel in panels(load(path))
            for target in panel.get("targets", [])]


def variable_queries() -> list[Query]:
    """The series selector of every `label_values(selector, label)` variable."""
    out = []
    for path in DASHBOARD_FILES:
        for var in load(path)["templating"]["list"]:
            if var["type"] == "query":
                m = _LABEL_VALUES.match(var["query"])
                assert m, f"{path.name} ${var['name']}: not label_values(): {var['query']}"
                out.append(Query(path.stem, f"${var['name']}", m["label"], m["selector"]))
    return out


def metric_names(expr: str) -> frozenset[str]:
    """Metric names an expression selects: identifiers outside strings, label
    matchers, ranges and grouping clauses that are neither functions nor
    keywords. Enough for Grafana-style PromQL; `{__name__=...}` selectors are
    not supported (the dashboards do not use them)."""
    stripped = _STRING.sub('""', expr)
    for pattern in (_MATCHERS, _RANGE, _GROUPING):
        stripped = pattern.sub(" ", stripped)
    names = set()
    for m in _TOKEN.finditer(stripped):
        ident = m["ident"]
        if not ident or ident in _KEYWORDS or stripped[m.end():].lstrip().startswith("("):
            continue
        names.add(ident)
    return frozenset(names)


def catalog_names() -> frozenset[str]:
    """Every series name the exporters publish (a histogram as its three series)."""
    names = set()
    for family in catalog.all_families():
        if family.kind == "histogram":
            names |= {f"{family.name}_bucket", f"{family.name}_sum", f"{family.name}_count"}
        else:
            names.add(family.name)
    return frozenset(names)


def rule_names() -> frozenset[str]:
    """Every series the recording rules in rules/ record."""
    return frozenset(rule["record"]
                     for path in sorted((REPO / "rules").glob("*.yml"))
                     for group in yaml.safe_load(path.read_text())["groups"]
                     for rule in group["rules"] if "record" in rule)


# Rollups a dashboard may read: those the bridges are built on (their names
# are a contract) and the few state sets and GPU counts documented with them.
# The per-Instance `instance:*` records are an implementation detail of the
# rules and may be renamed, so dashboards read raw exporter series instead.
STABLE_ROLLUPS = rollup_names() | {
    "proxy_pool:data_quality", "proxy_pool:admission_state",
    "proxy_pool:admission_state:count", "proxy_pool:gpus:count",
    "proxy_pool:gpu_memory_total_bytes:sum",
}
