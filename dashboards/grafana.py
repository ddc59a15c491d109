"""A small builder for importable Grafana dashboard JSON (schemaVersion 39).

Every query goes through the `${datasource}` template variable, so no
datasource UID is ever written into a dashboard: it imports into any Grafana
with any Prometheus-compatible datasource. Panels are laid out left to right
in rows, so a definition lists what to show, not pixel positions.

Absent stays absent: time series keep gaps (`spanNulls: false`), bar gauges
and stats use instant queries (a series that is gone now shows "No data",
not its last value), and no value mapping or option turns null into 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from poolscope.exporters.common import thresholds

SCHEMA_VERSION = 39
GRID_WIDTH = 24
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
NO_DATA = "No data"

PanelKind = Literal["timeseries", "bargauge", "stat", "state-timeline"]
Json = dict[str, Any]



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
    title: str
    panels: tuple[Panel, ...]


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
        defaults["custom"] = {"fillOpacity": 80, "lineWidth": 0, "spanNulls": False}
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
    """Rows stacked top to bottom; a row's panels flow left to right and wrap at 24."""
    out: list[Json] = []
    y = 0
    for row in rows:
        out.append({"id": len(out) + 1, "type": "row", "title": row.title, "collapsed": False,
                    "gridPos": {"h": 1, "w": GRID_WIDTH, "x": 0, "y": y}, "panels": []})
        y += 1
        x, line_height = 0, 0
        for panel in row.panels:
            if x + panel.width > GRID_WIDTH:
                x, y, line_height = 0, y + line_height, 0
            out.append(render(panel, len(out) + 1, x, y))
            x += panel.width
            line_height = max(line_height, panel.height)
        y += line_height
    return out


def datasource_variable() -> Json:
    return {"name": "datasource", "label": "Data source", "type": "datasource",
            "query": "prometheus", "current": {}, "hide": 0, "refresh": 1, "regex": "",
            "options": [], "includeAll": False, "multi": False}


def query_variable(name: str, label: str, query: str, *, multi: bool) -> Json:
    """A variable filled from Prometheus; `multi` also offers "All"."""
    return {"name": name, "label": label, "type": "query", "datasource": DATASOURCE,
            "query": query, "definition": query, "current": {}, "hide": 0,
            "refresh": 2, "regex": "", "sort": 1, "options": [],
            "multi": multi, "includeAll": multi}


def dashboard(*, uid: str, title: str, description: str, variables: Sequence[Json],
              rows: Sequence[Row]) -> Json:
    return {
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
        "annotations": {"list": []},
        "links": [{"title": "Poolscope", "type": "dashboards", "tags": ["poolscope"],
                   "asDropdown": False, "includeVars": True, "keepTime": True}],
        "templating": {"list": [datasource_variable(), *variables]},
        "panels": layout(rows),
    }
