"""Every default port is the one poolscope.service.ports names, wherever it is written.

A port changed in the code but not in a target example or a manifest would leave a
deploy that scrapes nothing; one changed in a manifest alone would collide again.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from poolscope.exporters.instance.config import build_parser as instance_parser
from poolscope.exporters.proxy.__main__ import build_parser as proxy_exporter_parser
from poolscope.proxy_bridge.__main__ import build_parser as proxy_bridge_parser
from poolscope.scheduler_bridge.__main__ import build_parser as scheduler_bridge_parser
from poolscope.scheduler_bridge.status.cli import DEFAULT_URL
from poolscope.service import ports

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
INSTANCE_BLOCK = range(ports.INSTANCE_EXPORTER, ports.INSTANCE_EXPORTER + 10)


def test_the_four_ports_are_distinct_and_outside_the_allocated_exporter_range() -> None:
    chosen = [ports.INSTANCE_EXPORTER, ports.PROXY_EXPORTER, ports.PROXY_BRIDGE,
              ports.SCHEDULER_BRIDGE]
    assert len(set(chosen)) == 4
    assert all(not 9090 <= p <= 9999 for p in chosen)
    assert all(p not in INSTANCE_BLOCK for p in chosen[1:])


@pytest.mark.parametrize(("parser", "port"), [
    (instance_parser, ports.INSTANCE_EXPORTER), (proxy_exporter_parser, ports.PROXY_EXPORTER),
    (proxy_bridge_parser, ports.PROXY_BRIDGE), (scheduler_bridge_parser, ports.SCHEDULER_BRIDGE),
])
def test_each_service_defaults_to_its_port_on_loopback(parser, port: int) -> None:
    listen = parser().get_default("listen")
    assert str(listen) == ports.loopback(port) or tuple(listen) == ("127.0.0.1", port)


def test_the_status_cli_asks_the_scheduler_bridge_on_its_port() -> None:
    assert DEFAULT_URL.endswith(f":{ports.SCHEDULER_BRIDGE}")


def _target_ports(kind: str) -> list[int]:
    found = []
    for path in DEPLOY.glob(f"*/targets/{kind}/*.json"):
        for group in json.loads(path.read_text()):
            found += [int(t.rpartition(":")[2]) for t in group["targets"]]
    assert found, kind
    return found


def test_target_examples_use_the_default_ports() -> None:
    assert set(_target_ports("instances")) <= set(INSTANCE_BLOCK)
    assert set(_target_ports("gateways")) == {ports.PROXY_EXPORTER}
    assert set(_target_ports("proxy-bridges")) == {ports.PROXY_BRIDGE}


def _container_ports(manifest: Path) -> set[int]:
    """The ports of the containers that run Poolscope's image (not the engine's)."""
    found = set()
    for doc in yaml.safe_load_all(manifest.read_text()):
        if doc and doc.get("kind") in ("Deployment", "StatefulSet", "DaemonSet"):
            for c in doc["spec"]["template"]["spec"]["containers"]:
                if c["image"].partition(":")[0].endswith("poolscope"):
                    found |= {p["containerPort"] for p in c.get("ports", [])}
    return found


@pytest.mark.parametrize(("manifest", "port"), [
    ("kubernetes/scheduler-bridge.yaml", ports.SCHEDULER_BRIDGE),
    ("kubernetes/proxy-bridge.yaml", ports.PROXY_BRIDGE),
    ("kubernetes/examples/engine-with-exporter.yaml", ports.INSTANCE_EXPORTER),
])
def test_manifests_serve_on_the_default_port(manifest: str, port: int) -> None:
    assert _container_ports(DEPLOY / manifest) == {port}


@pytest.mark.parametrize(("env_file", "port"), [
    ("systemd/instance.env.example", ports.INSTANCE_EXPORTER),
    ("systemd/proxy-bridge.env.example", ports.PROXY_BRIDGE),
    ("systemd/scheduler-bridge.env.example", ports.SCHEDULER_BRIDGE),
])
def test_systemd_examples_listen_on_the_default_port(env_file: str, port: int) -> None:
    listen = re.search(r"^POOLSCOPE_\w*LISTEN\w*=\S+:(\d+)$", (DEPLOY / env_file).read_text(),
                       re.M)
    assert listen is not None and int(listen.group(1)) == port


def test_docs_name_every_port() -> None:
    text = (REPO / "docs" / "ports.md").read_text()
    for port in (ports.INSTANCE_EXPORTER, ports.PROXY_EXPORTER, ports.PROXY_BRIDGE,
                 ports.SCHEDULER_BRIDGE):
        assert f"127.0.0.1:{port}" in text
