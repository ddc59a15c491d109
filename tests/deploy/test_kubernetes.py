"""deploy/kubernetes: every object is well-formed against vendored schemas,
the objects that refer to each other agree (selectors, port names, identity
labels), and every Poolscope container starts with flags its service accepts."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.deploy import prometheus_config
from tests.deploy.clis import check_command, console_scripts
from tests.support.prometheus import REPO

KUBE_DIR = REPO / "deploy" / "kubernetes"
MANIFESTS = sorted(KUBE_DIR.rglob("*.yaml"))
EXAMPLE = KUBE_DIR / "examples" / "engine-with-exporter.yaml"
SCHEMAS = yaml.safe_load((Path(__file__).parent / "k8s_schemas.yaml").read_text())
PROXY_ID_LABEL = "poolscope.io/proxy-id"
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


def _validate(doc: Doc) -> list[str]:
    assert doc["kind"] in SCHEMAS["$defs"], f"no vendored schema for {doc['kind']}"
    schema = {"$defs": SCHEMAS["$defs"], "$ref": f"#/$defs/{doc['kind']}"}
    validator = jsonschema.Draft202012Validator(schema)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator.iter_errors(doc)]


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


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: str(p.relative_to(KUBE_DIR)))
def test_every_document_matches_its_schema(path: Path) -> None:
    for doc in _docs(path):
        assert _validate(doc) == [], doc["metadata"]["name"]


def test_schemas_reject_a_misspelt_field() -> None:
    monitor = copy.deepcopy(_all("PodMonitor")[0])
    endpoint = monitor["spec"]["podMetricsEndpoints"][0]
    endpoint["honourLabels"] = endpoint.pop("honorLabels")
    assert any("honourLabels" in e for e in _validate(monitor))


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
    [keep] = endpoint["metricRelabelings"]
    [proxy_job_keep] = prometheus_config.job(prometheus_config.load(),
                                             "poolscope-proxy")["metric_relabel_configs"]
    assert keep["regex"] == proxy_job_keep["regex"]


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
    [listen] = [a.removeprefix("--listen=") for a in args if a.startswith("--listen=")]
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
