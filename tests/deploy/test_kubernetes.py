"""deploy/kubernetes: every object is well-formed against the schemas its API server
would check it with, the objects that refer to each other agree (selectors, port
names, identity labels), and every Poolscope container starts with flags its
service accepts.

The schemas are the real ones, offline: the Prometheus Operator's CRDs, vendored at
a release tag (tests/fixtures/prometheus-operator/), for the monitoring.coreos.com
kinds, and Kubernetes' own OpenAPI schemas, which kubernetes-validate bundles, for
the core kinds. Both are applied strictly: a field the schema does not name is an
error, as `kubectl apply` reports it by default (`--validate=strict`), not a field
the API server drops without a word. The Kustomization is kustomize's to
check, and kustomize refuses unknown fields itself (`kubectl kustomize` below).
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from harness.prometheus import REPO
from tests.deploy import prometheus_config
from tests.deploy.clis import check_command, console_scripts

KUBE_DIR = REPO / "deploy" / "kubernetes"
MANIFESTS = sorted(KUBE_DIR.rglob("*.yaml"))
EXAMPLE = KUBE_DIR / "examples" / "engine-with-exporter.yaml"
# The release the CRDs were copied from; a folder of that name holds them.
PROMETHEUS_OPERATOR = "v0.93.0"
CRD_DIR = REPO / "tests" / "fixtures" / "prometheus-operator" / PROMETHEUS_OPERATOR
# The Kubernetes API the core objects are checked against, among the versions the
# pinned kubernetes-validate bundles.
KUBERNETES_VERSION = "1.37.0"
KUSTOMIZE_API = "kustomize.config.k8s.io/"
PROXY_ID_LABEL = "poolscope.io/proxy-id"
# RFC 1123 label: what the API server takes as a Namespace or Service name, and the
# strictest of the name rules, so one rule serves every kind here.
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
Doc = dict[str, Any]


def _docs(path: Path) -> list[Doc]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _all(kind: str, paths: list[Path] = MANIFESTS) -> list[Doc]:
    return [d for p in paths for d in _docs(p) if d["kind"] == kind]


def _one(kind: str, name: str) -> Doc:
    [doc] = [d for d in _all(kind) if d["metadata"]["name"] == name]
    return doc


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return selector.items() <= labels.items()


def _sd_label(kind: str, label: str) -> str:
    """Prometheus' Kubernetes discovery name for an object label."""
    return f"__meta_kubernetes_{kind}_label_{re.sub(r'[^a-zA-Z0-9_]', '_', label)}"


def _relabel_source(endpoint: Doc, target: str) -> list[str]:
    [rule] = [r for r in endpoint["relabelings"] if r.get("targetLabel") == target]
    assert rule["action"] == "replace"
    return list(rule["sourceLabels"])


def _closed(schema: Any) -> Any:
    """A CRD schema as strict field validation applies it: an object that lists its
    properties and neither allows others nor preserves unknown fields takes no
    other field."""
    if isinstance(schema, list):
        return [_closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    closed = {k: (_closed(v) if k in ("items", "additionalProperties", "not", "anyOf",
                                      "allOf", "oneOf") else v) for k, v in schema.items()}
    if "properties" in schema:
        closed["properties"] = {k: _closed(v) for k, v in schema["properties"].items()}
        if ("additionalProperties" not in schema
                and not schema.get("x-kubernetes-preserve-unknown-fields")):
            closed["additionalProperties"] = False
    return closed


def _crd_validators() -> dict[tuple[str, str], jsonschema.protocols.Validator]:
    """(apiVersion, kind) -> a validator for each version a vendored CRD serves."""
    validators = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        [crd] = _docs(path)
        spec = crd["spec"]
        for version in spec["versions"]:
            if version["served"]:
                schema = _closed(version["schema"]["openAPIV3Schema"])
                # OpenAPI v3.0 schemas are JSON Schema draft 4 with extensions.
                validators[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = (
                    jsonschema.Draft4Validator(schema))
    assert validators, f"no CRDs in {CRD_DIR}"
    return validators


CRD_VALIDATORS = _crd_validators()


def _core_errors(doc: Doc) -> list[str]:
    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"]
    except kubernetes_validate.SchemaNotFoundError as e:
        return [e.message]
    return []


def _validate(doc: Doc) -> list[str]:
    """What the API server's schema check would refuse, as `path: message` (all of a
    CRD object's errors; the core check stops at its first)."""
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key not in CRD_VALIDATORS:
        if any(api.split("/")[0] == str(key[0]).split("/")[0] for api, _ in CRD_VALIDATORS):
            return [f"{key[0]} {key[1]}: no such kind in the CRDs of {PROMETHEUS_OPERATOR}"]
        return _core_errors(doc)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
              for e in CRD_VALIDATORS[key].iter_errors(doc)]
    # A CRD's schema leaves metadata to the API server, which checks it as ObjectMeta
    # for every kind: the core schema of an object with nothing but metadata does too.
    metadata = doc.get("metadata")
    return [*errors, *_core_errors({"apiVersion": "v1", "kind": "ConfigMap",
                                    "metadata": metadata})]


def _poolscope_containers() -> Iterator[tuple[Doc, Doc]]:
    """(Deployment, container) for every container that runs a Poolscope service."""
    scripts = console_scripts()
    for deployment in _all("Deployment"):
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            if container.get("command", [""])[0] in scripts:
                yield deployment, container


POOLSCOPE_CONTAINERS = list(_poolscope_containers())


def _container_id(item: tuple[Doc, Doc]) -> str:
    return f"{item[0]['metadata']['name']}/{item[1]['name']}"


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: str(p.relative_to(KUBE_DIR)))
def test_every_document_is_a_named_object(path: Path) -> None:
    docs = _docs(path)
    assert docs
    for doc in docs:
        assert doc["apiVersion"] and doc["kind"] and doc["metadata"]["name"]


OBJECTS = [(p, d) for p in MANIFESTS for d in _docs(p)
           if not d["apiVersion"].startswith(KUSTOMIZE_API)]


def _object_id(item: tuple[Path, Doc]) -> str:
    return f"{item[0].relative_to(KUBE_DIR)}:{item[1]['kind']}/{item[1]['metadata']['name']}"


@pytest.mark.parametrize("item", OBJECTS, ids=_object_id)
def test_every_object_matches_its_schema(item: tuple[Path, Doc]) -> None:
    _, doc = item
    assert _validate(doc) == []


@pytest.mark.parametrize("item", OBJECTS, ids=_object_id)
def test_every_object_name_is_a_dns_label(item: tuple[Path, Doc]) -> None:
    """The API server checks names in code, not in the schema."""
    _, doc = item
    for name in (doc["metadata"]["name"], doc["metadata"].get("namespace", "x")):
        assert DNS_LABEL.fullmatch(name), name


def test_every_kind_here_has_a_schema() -> None:
    kinds = {(d["apiVersion"], d["kind"]) for _, d in OBJECTS}
    assert {k for k in kinds if k[0].startswith("monitoring.coreos.com/")} == {
        ("monitoring.coreos.com/v1", "PodMonitor"), ("monitoring.coreos.com/v1", "ServiceMonitor"),
        ("monitoring.coreos.com/v1", "PrometheusRule")}
    assert kinds - CRD_VALIDATORS.keys() == {
        ("v1", "Namespace"), ("v1", "Service"), ("apps/v1", "Deployment")}


def _first_rule(prometheus_rule: Doc, kind: str) -> Doc:
    """The first recording (`record`) or alerting (`alert`) rule."""
    return next(r for g in prometheus_rule["spec"]["groups"] for r in g["rules"] if kind in r)


def _misspell(parent: Doc, field: str, wrong: str) -> None:
    parent[wrong] = parent.pop(field)


def _pod_monitor_endpoint(doc: Doc) -> Doc:
    return doc["spec"]["podMetricsEndpoints"][0]


def _bridge_container(doc: Doc) -> Doc:
    return doc["spec"]["template"]["spec"]["containers"][0]


BROKEN: dict[str, tuple[str, Any, str]] = {
    # name: (kind, how to break a copy, what the error must name)
    "crd-misspelt-field": ("PodMonitor", lambda d: _misspell(
        _pod_monitor_endpoint(d), "honorLabels", "honourLabels"), "honourLabels"),
    "crd-wrong-type": ("PodMonitor", lambda d: _pod_monitor_endpoint(d).update(
        honorLabels="yes"), "podMetricsEndpoints/0/honorLabels"),
    "crd-bad-duration": ("ServiceMonitor", lambda d: d["spec"]["endpoints"][0].update(
        interval="5 seconds"), "endpoints/0/interval"),
    "crd-misspelt-rule-field": ("PrometheusRule", lambda d: _misspell(
        _first_rule(d, "record"), "record", "recrod"), "recrod"),
    "crd-misspelt-alert-field": ("PrometheusRule", lambda d: _misspell(
        _first_rule(d, "alert"), "annotations", "anotations"), "anotations"),
    "crd-bad-alert-for": ("PrometheusRule", lambda d: _first_rule(d, "alert").update(
        {"for": "2 minutes"}), "for"),
    "crd-metadata-misspelt": ("PodMonitor", lambda d: _misspell(
        d["metadata"], "labels", "lables"), "lables"),
    "crd-unknown-version": ("ServiceMonitor", lambda d: d.update(
        apiVersion="monitoring.coreos.com/v2"), "no such kind"),
    "core-misspelt-field": ("Deployment", lambda d: _misspell(
        _bridge_container(d), "livenessProbe", "livenesProbe"), "livenesProbe"),
    "core-wrong-type": ("Deployment", lambda d: d["spec"].update(replicas="2"),
                        "spec/replicas"),
    "core-misspelt-service-field": ("Service", lambda d: _misspell(
        d["spec"]["ports"][0], "targetPort", "targetport"), "targetport"),
    "core-unknown-kind": ("Namespace", lambda d: d.update(kind="Namespaces"), "Namespaces"),
}


@pytest.mark.parametrize("case", BROKEN)
def test_schemas_reject_a_broken_copy(case: str) -> None:
    kind, breaks, named = BROKEN[case]
    doc = copy.deepcopy(next(d for d in _all(kind) if d["metadata"]["name"].startswith(
        "poolscope")))
    assert _validate(doc) == []
    breaks(doc)
    errors = _validate(doc)
    assert any(named in e for e in errors), errors


def test_kustomize_rejects_a_misspelt_kustomization_field(tmp_path: Path) -> None:
    kubectl = shutil.which("kubectl")
    if not kubectl:
        pytest.skip("kubectl not installed")
    copied = tmp_path / "kubernetes"
    shutil.copytree(KUBE_DIR, copied)
    kustomization = copied / "kustomization.yaml"
    text = kustomization.read_text()
    assert "\nnamespace: " in text
    kustomization.write_text(text.replace("\nnamespace: ", "\nnamespce: "))
    done = subprocess.run([kubectl, "kustomize", str(copied)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "namespce" in done.stderr


def test_kustomization_applies_every_manifest_but_the_examples() -> None:
    [kustomization] = _docs(KUBE_DIR / "kustomization.yaml")
    shipped = {p.name for p in KUBE_DIR.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(kustomization["resources"]) == sorted(shipped)


def test_kubectl_kustomize_renders_every_object() -> None:
    kubectl = shutil.which("kubectl")
    if not kubectl:
        pytest.skip("kubectl not installed; the structural checks here still ran")
    done = subprocess.run([kubectl, "kustomize", str(KUBE_DIR)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    rendered = [d for d in yaml.safe_load_all(done.stdout) if d]
    [kustomization] = _docs(KUBE_DIR / "kustomization.yaml")
    sources = [d for name in kustomization["resources"] for d in _docs(KUBE_DIR / name)]
    assert sorted((d["kind"], d["metadata"]["name"]) for d in rendered) == sorted(
        (d["kind"], d["metadata"]["name"]) for d in sources)
    for doc in rendered:
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == kustomization["namespace"]
        for container in doc.get("spec", {}).get("template", {}).get("spec", {}).get(
                "containers", []):
            assert container["image"] == "poolscope:0.1.0"


@pytest.mark.parametrize("service", _all("Service"), ids=lambda s: s["metadata"]["name"])
def test_services_select_one_deployment_and_its_ports(service: Doc) -> None:
    selected = [d for d in _all("Deployment")
                if _matches(service["spec"]["selector"], d["spec"]["template"]["metadata"]
                            ["labels"])]
    assert len(selected) == 1
    [deployment] = selected
    template = deployment["spec"]["template"]
    assert _matches(deployment["spec"]["selector"]["matchLabels"], template["metadata"]["labels"])
    ports = {p["name"] for c in template["spec"]["containers"] for p in c["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports


def test_service_monitor_scrapes_both_bridges() -> None:
    monitor = _one("ServiceMonitor", "poolscope-bridges")
    selected = [s for s in _all("Service")
                if _matches(monitor["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])]
    assert {s["spec"]["selector"]["app.kubernetes.io/name"] for s in selected} == {
        "poolscope-scheduler-bridge", "poolscope-proxy-bridge"}
    [endpoint] = monitor["spec"]["endpoints"]
    for service in selected:
        assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert _relabel_source(endpoint, "proxy_id") == [_sd_label("service", PROXY_ID_LABEL)]
    proxy_bridges = [s for s in selected if PROXY_ID_LABEL in s["metadata"]["labels"]]
    assert [s["spec"]["selector"]["app.kubernetes.io/name"] for s in proxy_bridges] == [
        "poolscope-proxy-bridge"]


def _env(container: Doc) -> dict[str, str]:
    """Container env as the kubelet would expand it; downward-API values are
    stood in for by their field path."""
    return {e["name"]: e.get("value") or e["valueFrom"]["fieldRef"]["fieldPath"]
            for e in container.get("env", [])}


def test_instance_pod_monitor_agrees_with_the_sidecar() -> None:
    """`up` for a dead exporter carries the SD labels: they must equal the exporter's flags."""
    monitor = _one("PodMonitor", "poolscope-instance-exporters")
    [engine] = _all("Deployment", [EXAMPLE])
    pod = engine["spec"]["template"]
    assert _matches(monitor["spec"]["selector"]["matchLabels"], pod["metadata"]["labels"])
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    [sidecar] = [c for c in pod["spec"]["containers"]
                 if endpoint["port"] in {p["name"] for p in c.get("ports", [])}]
    assert sidecar["command"] == ["poolscope-instance-exporter"]
    env = _env(sidecar)
    assert PROXY_ID_LABEL in pod["metadata"]["labels"]
    assert _relabel_source(endpoint, "proxy_id") == [_sd_label("pod", PROXY_ID_LABEL)]
    assert "--proxy-id=$(PROXY_ID)" in sidecar["args"]
    assert env["PROXY_ID"] == f"metadata.labels['{PROXY_ID_LABEL}']"
    assert _relabel_source(endpoint, "instance_id") == ["__meta_kubernetes_pod_name"]
    assert "--instance-id=$(POD_NAME)" in sidecar["args"]
    assert env["POD_NAME"] == "metadata.name"


def test_proxy_pod_monitor_labels_the_pool() -> None:
    [endpoint] = _one("PodMonitor", "poolscope-proxies")["spec"]["podMetricsEndpoints"]
    assert _relabel_source(endpoint, "proxy_id") == [_sd_label("pod", PROXY_ID_LABEL)]


@pytest.mark.parametrize(("monitor", "job"), [
    ("poolscope-instance-exporters", "poolscope-instance"),
    ("poolscope-proxies", "poolscope-proxy")])
def test_pod_monitors_keep_the_series_the_bare_host_jobs_keep(monitor: str, job: str) -> None:
    [endpoint] = _one("PodMonitor", monitor)["spec"]["podMetricsEndpoints"]
    [keep] = endpoint["metricRelabelings"]
    [job_keep] = prometheus_config.job(prometheus_config.load(), job)["metric_relabel_configs"]
    assert keep == {"sourceLabels": job_keep["source_labels"], "regex": job_keep["regex"],
                    "action": job_keep["action"]}


def test_monitors_scrape_like_the_bare_host_config() -> None:
    """Same intervals as prometheus.yml, which the rules' freshness threshold assumes."""
    scrape = prometheus_config.load()["global"]
    endpoints = [*(e for m in _all("PodMonitor") for e in m["spec"]["podMetricsEndpoints"]),
                 *(e for m in _all("ServiceMonitor") for e in m["spec"]["endpoints"])]
    assert len(endpoints) == 3
    for endpoint in endpoints:
        assert endpoint["interval"] == scrape["scrape_interval"]
        assert endpoint["scrapeTimeout"] == scrape["scrape_timeout"]
        assert endpoint["honorLabels"] is True


def test_every_poolscope_service_runs_somewhere() -> None:
    assert {c["command"][0] for _, c in POOLSCOPE_CONTAINERS} == {
        "poolscope-instance-exporter", "poolscope-scheduler-bridge", "poolscope-proxy-bridge"}


@pytest.mark.parametrize("item", POOLSCOPE_CONTAINERS, ids=_container_id)
def test_container_args_are_accepted_and_listen_on_the_pod(item: tuple[Doc, Doc]) -> None:
    _, container = item
    env = _env(container)
    args = [re.sub(r"\$\((\w+)\)", lambda m: re.sub(r"\W", "-", env[m.group(1)]), a)
            for a in container["args"]]
    check_command([*container["command"], *args])
    [listen] = [a.partition("=")[2] for a in args
                if a.partition("=")[0] in ("--web.listen-address", "--listen")]
    host, _, port = listen.rpartition(":")
    assert host == "0.0.0.0"  # loopback, the default, is unreachable from outside the pod
    assert int(port) in {p["containerPort"] for p in container["ports"]}


@pytest.mark.parametrize("item", POOLSCOPE_CONTAINERS, ids=_container_id)
def test_containers_are_hardened_and_bounded(item: tuple[Doc, Doc]) -> None:
    deployment, container = item
    pod = deployment["spec"]["template"]["spec"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    non_root = security.get("runAsNonRoot", pod.get("securityContext", {}).get("runAsNonRoot"))
    assert non_root is True
    for bound in ("requests", "limits"):
        assert set(container["resources"][bound]) == {"cpu", "memory"}
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert _env(container)["PYTHONDONTWRITEBYTECODE"] == "1"  # nothing to write .pyc to


@pytest.mark.parametrize("item", [i for i in POOLSCOPE_CONTAINERS if "bridge" in i[1]["name"]],
                         ids=_container_id)
def test_bridges_are_ready_only_with_a_backend(item: tuple[Doc, Doc]) -> None:
    deployment, container = item
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert deployment["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
