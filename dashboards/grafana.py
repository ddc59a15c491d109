"""A small builder for importable Grafana dashboard JSON (schemaVersion 39).

Every query goes through the `${datasource}` template variable, so no
datasource UID is ever written into a dashboard: it imports into any Grafana
with any Prometheus-compatible datasource. Panels are laid out left to right
in rows, so a definition lists what to show, not pixel positions.

Absent stays absent: time series keep gaps (`spanNulls: false`), bar gauges
and stats use instant queries (a series that is gone now shows "No data",
not its last value), and no value mapping or option turns null into 0.

Every file is valid for Grafana's own dashboard schema (the grafana-foundation-sdk
models of GRAFANA_VERSION; tests/dashboards/test_grafana_schema.py) and carries
what Grafana's "Export for sharing externally" writes: `__inputs` / `__requires`
and the built-in "Annotations & Alerts" annotation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from poolscope.contract import thresholds

SCHEMA_VERSION = 39
# The release whose schema the dashboards are validated against (pyproject.toml
# pins grafana-foundation-sdk to its build).
GRAFANA_VERSION = "11.6.0"
GRID_WIDTH = 24
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
NO_DATA = "No data"

PanelKind = Literal["timeseries", "bargauge", "stat", "state-timeline"]
Json = dict[str, Any]
# The names Grafana's export gives each panel plugin in `__requires`.
PANEL_NAMES: dict[str, str] = {"timeseries": "Time series", "bargauge": "Bar gauge",
                               "stat": "Stat", "state-timeline": "State timeline"}
# Grafana's built-in annotation, as every exported dashboard carries it.
BUILT_IN_ANNOTATION: Json = {
    "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
    "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
    "name": "Annotations & Alerts",
    "target": {"limit": 100, "matchAny": False, "tags": [], "type": "dashboard"},
    "type": "dashboard"}


@dataclass(frozen=True)
class Target:
    """One PromQL query of a panel and how its series are named."""

    expr: str
    legend: str = ""


@dataclass(frozen=True)
class StateSet:
    """A one-hot state set (one series per state, 1 for the current one).

    Grafana colours values, not labels, so the current state is turned into a
    code (its position + 1) and value mappings turn the code back into the
    state's name. Only series equal to 1 take part: when no state is 1 the
    result is absent and the panel says "No data", never a state it does not
    know.
    """

    metric: str
    label: str
    states: tuple[tuple[str, str], ...]  # (state, colour), best first

    def expr(self, matchers: str, by: str) -> str:
        terms = "\n  or ".join(
            f'{code} * ({self.metric}{{{self.label}="{state}",{matchers}}} == 1)'
            for code, (state, _) in enumerate(self.states, start=1))
        return f"max by ({by}) (\n    {terms}\n)"

    def mappings(self) -> tuple[tuple[float, str, str], ...]:
        return tuple((code, state, colour)
                     for code, (state, colour) in enumerate(self.states, start=1))


@dataclass(frozen=True)
class Panel:
    """What one panel shows; `render` turns it into Grafana JSON."""

    kind: PanelKind
    title: str
    description: str
    targets: tuple[Target, ...]
    unit: str = "short"
    width: int = 12
    height: int = 8
    ratio: bool = False  # a 0..1 ratio: 0..1 scale, amber and red threshold steps
    mappings: tuple[tuple[float, str, str], ...] = ()  # (value, text, colour)

    @property
    def instant(self) -> bool:
        """Gauges and stats show the value now, so a vanished series reads "No data"."""
        return self.kind in ("bargauge", "stat")


@dataclass(frozen=True)
class Row:
    """A titled row; a collapsed one holds its panels until it is opened, so a
    detail section costs no queries until someone looks at it."""

    title: str
    panels: tuple[Panel, ...]
    collapsed: bool = False


def _field_config(panel: Panel) -> Json:
    defaults: Json = {"unit": panel.unit, "noValue": NO_DATA, "color": {"mode": "palette-classic"}}
    # A ratio's healthy limit is 1 (load, saturation, queue pressure): amber from
    # thresholds.RATIO_WARN, red at the limit.
    steps = (((None, "green"), (thresholds.RATIO_WARN, "#EAB839"), (1, "red")) if panel.ratio
             else ((None, "green"),))
    defaults["thresholds"] = {"mode": "absolute",
                              "steps": [{"value": v, "color": c} for v, c in steps]}
    if panel.ratio and panel.kind != "timeseries":
        defaults |= {"min": 0, "max": 1}
    if panel.instant:
        defaults["color"] = {"mode": "thresholds"}
    if panel.mappings:
        defaults["color"] = {"mode": "fixed", "fixedColor": "text"}
        defaults["mappings"] = [{"type": "value", "options": {
            f"{value:g}": {"text": text, "color": colour, "index": i}
            for i, (value, text, colour) in enumerate(panel.mappings)}}]
    if panel.kind == "timeseries":
        defaults["custom"] = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10,
                              "showPoints": "never", "spanNulls": False}
        if panel.ratio:
            # A soft axis: saturation past 100 % must stay visible, not be clipped.
            defaults["custom"] |= {"axisSoftMin": 0, "axisSoftMax": 1,
                                   "thresholdsStyle": {"mode": "line"}}
    if panel.kind == "state-timeline":
        # Not in the panel's schema: "Connect null values" is off unless set, so a
        # gap stays a gap.
        defaults["custom"] = {"fillOpacity": 80, "lineWidth": 0}
    return {"defaults": defaults, "overrides": []}


def _options(panel: Panel) -> Json:
    reduce = {"calcs": ["lastNotNull"], "fields": "", "values": False}
    if panel.kind == "timeseries":
        return {"legend": {"displayMode": "table", "placement": "right", "showLegend": True,
                           "calcs": ["lastNotNull", "max"]},
                "tooltip": {"mode": "multi", "sort": "desc"}}
    if panel.kind == "bargauge":
        return {"displayMode": "gradient", "orientation": "horizontal", "showUnfilled": True,
                "minVizHeight": 10, "minVizWidth": 0, "valueMode": "color",
                "reduceOptions": reduce}
    if panel.kind == "stat":
        return {"colorMode": "value", "graphMode": "none", "justifyMode": "auto",
                "textMode": "value_and_name", "orientation": "auto", "reduceOptions": reduce}
    return {"showValue": "auto", "mergeValues": True, "rowHeight": 0.8, "alignValue": "left",
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": False},
            "tooltip": {"mode": "single", "sort": "none"}}


def render(panel: Panel, panel_id: int, x: int, y: int) -> Json:
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "fieldConfig": _field_config(panel),
        "options": _options(panel),
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": DATASOURCE, "editorMode": "code",
             "expr": t.expr, "legendFormat": t.legend or "__auto",
             "range": not panel.instant, "instant": panel.instant}
            for i, t in enumerate(panel.targets)],
    }


def layout(rows: Sequence[Row]) -> list[Json]:
    """Rows stacked top to bottom; a row's panels flow left to right and wrap at 24.

    A collapsed row keeps its panels inside it, placed below the row as they
    will be when it is opened; the next row follows the collapsed one directly.
    """
    out: list[Json] = []
    next_id = 1
    y = 0
    for row in rows:
        row_json: Json = {"id": next_id, "type": "row", "title": row.title,
                          "collapsed": row.collapsed,
                          "gridPos": {"h": 1, "w": GRID_WIDTH, "x": 0, "y": y}, "panels": []}
        out.append(row_json)
        next_id += 1
        y += 1
        x, line_y, line_height = 0, y, 0
        for panel in row.panels:
            if x + panel.width > GRID_WIDTH:
                x, line_y, line_height = 0, line_y + line_height, 0
            rendered = render(panel, next_id, x, line_y)
            next_id += 1
            (row_json["panels"] if row.collapsed else out).append(rendered)
            x += panel.width
            line_height = max(line_height, panel.height)
        if not row.collapsed:
            y = line_y + line_height
    return out


def datasource_variable() -> Json:
    return {"name": "datasource", "label": "Data source", "type": "datasource",
            "query": "prometheus", "current": {}, "hide": 0, "refresh": 1, "regex": "",
            "options": [], "includeAll": False, "multi": False}


def query_variable(name: str, label: str, query: str, *, multi: bool,
                   all_value: str | None = None) -> Json:
    """A variable filled from Prometheus; `multi` also offers "All".

    `all_value` is what "All" sends instead of every value joined: `.*` for a
    label that a single-Prometheus setup does not have, where there is no value
    to join and `label=~".*"` still matches every series.
    """
    variable: Json = {"name": name, "label": label, "type": "query", "datasource": DATASOURCE,
                      "query": query, "current": {}, "hide": 0,
                      "refresh": 2, "regex": "", "sort": 1, "options": [],
                      "multi": multi, "includeAll": multi}
    if all_value is not None:
        variable["allValue"] = all_value
        variable["current"] = {"selected": True, "text": ["All"], "value": ["$__all"]}
    return variable


def requires(panels: Sequence[Json]) -> list[Json]:
    """`__requires` as Grafana's export writes it: Grafana, the datasource
    plugin, and each panel plugin used (in collapsed rows too)."""
    kinds = {p["type"] for p in panels} | {n["type"] for p in panels for n in p.get("panels", [])}
    return [
        {"type": "grafana", "id": "grafana", "name": "Grafana", "version": GRAFANA_VERSION},
        {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"},
        *({"type": "panel", "id": kind, "name": PANEL_NAMES[kind], "version": ""}
          for kind in sorted(kinds - {"row"})),
    ]


def dashboard(*, uid: str, title: str, description: str, variables: Sequence[Json],
              rows: Sequence[Row]) -> Json:
    panels = layout(rows)
    return {
        # No `__inputs`: the datasource is a template variable, chosen after import.
        "__inputs": [],
        "__elements": {},
        "__requires": requires(panels),
        "id": None,
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["poolscope"],
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        "timezone": "browser",
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "annotations": {"list": [BUILT_IN_ANNOTATION]},
        "links": [{"title": "Poolscope", "type": "dashboards", "tags": ["poolscope"],
                   "asDropdown": False, "includeVars": True, "keepTime": True}],
        "templating": {"list": [datasource_variable(), *variables]},
        "panels": panels,
    }
