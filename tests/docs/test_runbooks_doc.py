"""docs/runbooks.md is what the on-call opens from a page, so every alert's section has
one shape (kubernetes-mixin's): Meaning, Impact, Diagnosis, Mitigation, in that order.
Its Diagnosis quotes the alert's own expression from rules/alerts.yml, so a query pasted
at 3 a.m. judges what the alert judged; any other query there reads only the alert's own
range windows, since a `[5m]` beside a `[1m]` alert can show a healthy pool while the
alert fires. It gives a `kubectl` and a `systemctl` step, because both deploys are
shipped, and names only units and objects that deploy/ ships, so a command copied from
it is one that works.

tests/rules/test_alerts.py checks the alert side (each alert's `runbook_url`, and the
severity each section opens with); this file checks the section's body, and that each
`runbook_url` anchor lands on a heading GitHub renders."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ALERTS = REPO / "rules" / "alerts.yml"
RUNBOOKS = REPO / "docs" / "runbooks.md"
OPERATING = REPO / "docs" / "operating.md"
SYSTEMD = REPO / "deploy" / "systemd"
KUBERNETES = REPO / "deploy" / "kubernetes"

HEADINGS = ("Meaning", "Impact", "Diagnosis", "Mitigation")
# A PromQL range or subquery window: `[5m]`, `[1h30m]`, `[1m:5s]`, `[1m:]`.
_DURATION = r"\d+(?:ms|[smhdwy])"
WINDOW = re.compile(rf"\[(?:{_DURATION})+(?::(?:{_DURATION})*)?\]")
PROMQL_BLOCK = re.compile(r"^```promql\n(.*?)^```$", re.M | re.S)
CODE_SPAN = re.compile(r"`([^`\n]+)`")
# kubectl's short and long kind names, as the runbooks write them, to manifest kinds.
KINDS = {"deploy": "Deployment", "deployment": "Deployment", "svc": "Service",
         "service": "Service", "podmonitor": "PodMonitor", "servicemonitor": "ServiceMonitor",
         "prometheusrule": "PrometheusRule", "namespace": "Namespace", "ns": "Namespace"}
# The placeholder the runbooks use for a pool, and the pool the shipped manifests name.
POOL_PLACEHOLDER, SHIPPED_POOL = "<pool>", "pool-1"


def alert_rules() -> dict[str, list[dict[str, Any]]]:
    """Each alert's rules by name (an alert may be two rules: a window per input)."""
    named: dict[str, list[dict[str, Any]]] = {}
    for group in yaml.safe_load(ALERTS.read_text())["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                named.setdefault(rule["alert"], []).append(rule)
    return named


def sections(text: str) -> dict[str, str]:
    """The body under each `## ` heading, by heading."""
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def subsections(section: str) -> list[tuple[str, str]]:
    """(heading, body) for each `### ` heading of a section, in order."""
    parts = re.split(r"^### (.+)$", section, flags=re.M)
    return [(parts[i].strip(), parts[i + 1]) for i in range(1, len(parts) - 1, 2)]


def windows(promql: str) -> set[str]:
    return set(WINDOW.findall(promql))


def squeeze(promql: str) -> str:
    """Whitespace does not change a query (a doc may wrap it otherwise): compare
    without it."""
    return re.sub(r"\s+", "", promql)


def problems(rules: list[dict[str, Any]], section: str | None) -> list[str]:
    """What keeps one alert's runbook section from its shape; empty when it has it.

    A pure function of the rules and the text, so that the test below can show it
    catches each fault on a section broken on purpose."""
    if section is None:
        return ["no runbook section"]
    parts = subsections(section)
    found = tuple(heading for heading, _ in parts)
    if found != HEADINGS:
        return [f"headings {found}, want {HEADINGS} in that order"]
    body = dict(parts)
    out = []
    for hold in sorted({rule.get("for") for rule in rules}, key=str):
        said = "no `for:`" if hold is None else f"`for: {hold}`"
        if said not in body["Meaning"]:
            out.append(f"Meaning does not say {said}")
    diagnosis = body["Diagnosis"]
    blocks = [squeeze(b) for b in PROMQL_BLOCK.findall(diagnosis)]
    if not blocks:
        out.append("Diagnosis has no ```promql query")
    for rule in rules:
        if squeeze(rule["expr"]) not in blocks:
            quoted = " ".join(rule["expr"].split())
            out.append(f"Diagnosis does not quote the expression {quoted!r}")
    allowed = set().union(*(windows(rule["expr"]) for rule in rules))
    foreign = windows(diagnosis) - allowed
    if foreign:
        out.append(f"Diagnosis reads windows {sorted(foreign)}; the alert reads "
                   f"{sorted(allowed) or 'none'}")
    for tool in ("poolscope-status", "kubectl", "systemctl"):
        if tool not in diagnosis:
            out.append(f"Diagnosis has no `{tool}` step")
    return out


@pytest.mark.parametrize("name", sorted(alert_rules()))
def test_an_alerts_runbook_has_the_four_parts_and_its_own_query(name: str) -> None:
    section = sections(RUNBOOKS.read_text()).get(name)
    assert problems(alert_rules()[name], section) == [], name


GOOD = textwrap.dedent("""\
    **Warning.** A ticket.

    ### Meaning

    It fired, `for: 2m`.

    ### Impact

    Some.

    ### Diagnosis

    ```promql
    sum by (proxy_id) (rate(x_total[1m])) > 0
    ```

    - `poolscope-status <pool>`; `kubectl -n poolscope get pods`;
      `systemctl status poolscope-scheduler-bridge`.

    ### Mitigation

    Fix it.
    """)
RULE = {"alert": "PoolscopeX", "expr": "sum by (proxy_id) (\n  rate(x_total[1m])\n) > 0\n",
        "for": "2m"}


@pytest.mark.parametrize(("broken", "complaint"), [
    (None, "no runbook section"),
    (GOOD.replace("### Impact", "### Effect"), "headings"),
    (GOOD.replace("### Mitigation\n\nFix it.\n", "")
         .replace("### Impact", "### Mitigation\n\nFix it.\n\n### Impact"), "headings"),
    (GOOD.replace("`for: 2m`", "for two minutes"), "does not say `for: 2m`"),
    (GOOD.replace("```promql", "```"), "no ```promql query"),
    (GOOD.replace("[1m]", "[5m]"), "does not quote the expression"),
    (GOOD.replace("`kubectl -n poolscope get pods`", "the pods"), "no `kubectl` step"),
    (GOOD.replace("`systemctl status poolscope-scheduler-bridge`", "its unit"),
     "no `systemctl` step"),
    (GOOD.replace("`poolscope-status <pool>`; ", ""), "no `poolscope-status` step"),
    (GOOD.replace("- `poolscope-status",
                  "- `sum(rate(x_total[5m]))`, `max_over_time(y[1m:5s])`.\n- `poolscope-status"),
     "reads windows ['[1m:5s]', '[5m]']"),
])
def test_the_shape_check_catches_each_fault(broken: str | None, complaint: str) -> None:
    assert problems([RULE], GOOD) == []
    found = problems([RULE], broken)
    assert any(complaint in p for p in found), found


def test_every_runbook_url_lands_on_a_heading() -> None:
    """GitHub's anchor of `## PoolscopeX` is `#poolscopex`: each alert's link opens
    its section, not the top of the page."""
    anchors = {github_anchor(h) for h in re.findall(r"^#+ (.+)$", RUNBOOKS.read_text(),
                                                    flags=re.M)}
    for name, rules in alert_rules().items():
        for rule in rules:
            url = rule["annotations"]["runbook_url"]
            assert url.split("#", 1)[0].endswith("/docs/runbooks.md"), (name, url)
            assert url.split("#", 1)[1] in anchors, (name, url)


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation dropped, spaces as '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_runbooks_name_only_shipped_systemd_units() -> None:
    """Each `poolscope-*` unit a `systemctl` or `journalctl` step names is one
    deploy/systemd ships (`name@<x>` is the template `name@.service`)."""
    shipped = {p.name for p in SYSTEMD.glob("*.service")}
    named = set()
    for span in CODE_SPAN.findall(RUNBOOKS.read_text()):
        if re.match(r"(systemctl|journalctl)\b", span):
            named.update(re.findall(r"\bpoolscope-[a-z-]*[a-z](?:@\S*)?", span))
    assert named, "no systemd step names a Poolscope unit"
    unknown = {u for u in named
               if (u.split("@")[0] + "@.service" if "@" in u else u + ".service") not in shipped}
    assert not unknown, f"units deploy/systemd does not ship: {sorted(unknown)}"


def _manifests() -> tuple[set[tuple[str, str]], set[str]]:
    """(kind, name) of every object deploy/kubernetes ships, and every `key=value`
    label it sets or selects on (a PodMonitor's selector names the pods' labels)."""
    objects, labels = set(), set()
    for path in KUBERNETES.rglob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if not isinstance(doc, dict) or "metadata" not in doc:
                continue
            objects.add((doc["kind"], doc["metadata"]["name"]))
            spec = doc.get("spec", {})
            for found in (doc["metadata"].get("labels", {}),
                          spec.get("template", {}).get("metadata", {}).get("labels", {}),
                          spec.get("selector", {}).get("matchLabels", {})):
                labels.update(f"{k}={v}" for k, v in found.items())
    return objects, labels


def test_the_runbooks_name_only_shipped_kubernetes_objects() -> None:
    """Each `poolscope-*` object a `kubectl` step names (`deploy/NAME`, `svc/NAME`,
    `prometheusrule NAME`, ...) and each Poolscope label it selects on
    (`poolscope.io/...`, `app.kubernetes.io/name=poolscope...`) is in deploy/kubernetes;
    `<pool>` stands for the shipped pool-1. The Operator's own objects (Prometheus,
    Alertmanager) are not ours to check."""
    objects, labels = _manifests()
    named, selected = set(), set()
    for span in CODE_SPAN.findall(RUNBOOKS.read_text()):
        if not span.startswith("kubectl"):
            continue
        span = span.replace(POOL_PLACEHOLDER, SHIPPED_POOL)
        for kind, name in re.findall(r"\b([a-z]+)[/ ](poolscope-[\w-]+)", span):
            if kind in KINDS:
                named.add((KINDS[kind], name))
        for selector in re.findall(r"-l (\S+)", span):
            selected.update(s for s in selector.split(",")
                            if s.startswith(("poolscope.io/", "app.kubernetes.io/name=poolscope")))
    assert named, "no kubectl step names a Poolscope object"
    assert not named - objects, f"not in deploy/kubernetes: {sorted(named - objects)}"
    assert not selected - labels, f"labels no manifest sets: {sorted(selected - labels)}"


def test_operating_says_how_to_wire_the_watchdog_to_a_dead_mans_switch() -> None:
    """The Watchdog's runbook sends the reader to operating.md for the wiring: the
    section is there, names the receiver the example Alertmanager routes it to, and
    the runbook's link lands on it."""
    text = OPERATING.read_text()
    heading = "The Watchdog and a dead man's switch"
    assert re.search(rf"^#+ {re.escape(heading)}$", text, flags=re.M)
    wiring = text[text.index(heading):]
    assert "`watchdog`" in wiring and "send_resolved: false" in wiring
    runbook = sections(RUNBOOKS.read_text())["PoolscopeWatchdog"]
    assert f"operating.md#{github_anchor(heading)}" in runbook
