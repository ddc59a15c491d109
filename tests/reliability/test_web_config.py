"""--web.config.file on the real services: TLS, basic auth with bcrypt hashes, client
certificates, a moved telemetry path; scraped by a real Prometheus with its own
`basic_auth` and `tls_config`, as an operator's existing scrape config would."""

from __future__ import annotations

import base64
import http.client
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest
import yaml

from deploy.demo.processes import port_or_free
from harness.commands import command_process
from harness.polling import eventually
from harness.prometheus import running_prometheus
from tests.reliability.stack import self_signed_certificate

PASSWORD = "correct horse"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A server certificate, and a CA with one client certificate it signed."""
    folder = tmp_path_factory.mktemp("pki")
    cert, key = self_signed_certificate(folder)
    run = {"check": True, "capture_output": True, "timeout": 60}
    ca, ca_key = folder / "ca.pem", folder / "ca.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(ca_key), "-out",
                    str(ca), "-days", "1", "-subj", "/CN=poolscope-test-ca",
                    "-addext", "basicConstraints=critical,CA:TRUE",
                    "-addext", "keyUsage=critical,keyCertSign"], **run)
    client, client_key, csr = folder / "client.pem", folder / "client.key", folder / "client.csr"
    subprocess.run(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(client_key), "-out", str(csr),
                    "-subj", "/CN=prometheus"], **run)
    ext = folder / "client.ext"
    ext.write_text("extendedKeyUsage=clientAuth\n")
    subprocess.run(["openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey",
                    str(ca_key), "-CAcreateserial", "-out", str(client), "-days", "1",
                    "-extfile", str(ext)], **run)
    return {"cert": cert, "key": key, "ca": ca, "client": client, "client_key": client_key}


def get(url: str, context: ssl.SSLContext, password: str | None = None) -> int:
    request = urllib.request.Request(url)
    if password is not None:
        token = base64.b64encode(f"prometheus:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code


def healthz(url: str, context: ssl.SSLContext) -> int:
    try:
        return get(f"{url}/healthz", context)
    except (OSError, http.client.HTTPException):
        return 0


@pytest.fixture
def basic_auth_exporter(pki: dict[str, Path], tmp_path: Path) -> Iterator[str]:
    """The Instance exporter behind TLS and basic auth, its page moved to /probe/metrics."""
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=10)).decode()
    config = tmp_path / "web.yml"
    config.write_text(yaml.safe_dump({
        "tls_server_config": {"cert_file": str(pki["cert"]), "key_file": str(pki["key"])},
        "basic_auth_users": {"prometheus": hashed}}))
    address = f"127.0.0.1:{port_or_free(0)}"
    with command_process("poolscope.exporters.instance", "--instance-id=web-1", "--proxy-id=p",
                         f"--web.listen-address={address}", f"--web.config.file={config}",
                         "--web.telemetry-path=/probe/metrics", "--log.format=json"):
        yield address


def test_tls_and_basic_auth_from_a_web_config_guard_the_exporter(
        basic_auth_exporter: str, pki: dict[str, Path], tmp_path: Path) -> None:
    trusted = ssl.create_default_context(cafile=str(pki["cert"]))
    url = f"https://{basic_auth_exporter}"
    eventually(lambda: healthz(url, trusted), lambda s: s == 200, 30, "/healthz over TLS")
    assert get(f"{url}/probe/metrics", trusted) == 401
    assert get(f"{url}/probe/metrics", trusted, "wrong") == 401
    assert get(f"{url}/probe/metrics", trusted, PASSWORD) == 200
    assert get(f"{url}/metrics", trusted, PASSWORD) == 404  # the page moved
    tls = {"scheme": "https", "tls_config": {"ca_file": str(pki["cert"])}, "honor_labels": True,
           "metrics_path": "/probe/metrics", "scrape_interval": "1s",
           "static_configs": [{"targets": [basic_auth_exporter]}]}
    jobs = [{**tls, "job_name": "with-password",
             "basic_auth": {"username": "prometheus", "password": PASSWORD}},
            {**tls, "job_name": "wrong-password",
             "basic_auth": {"username": "prometheus", "password": "guess"}}]
    with running_prometheus(tmp_path / "prometheus", jobs) as prom:
        prom.wait_for('up{job="with-password"} == 1', timeout=30)
        prom.wait_for('up{job="wrong-password"} == 0', timeout=30)
        assert prom.query('poolscope_host_cpus{instance_id="web-1",job="with-password"}')
        assert prom.query('poolscope_build_info{job="with-password"}')


def test_a_bridge_requires_a_client_certificate_its_ca_signed(
        pki: dict[str, Path], tmp_path: Path) -> None:
    config = tmp_path / "web.yml"
    config.write_text(yaml.safe_dump({"tls_server_config": {
        "cert_file": str(pki["cert"]), "key_file": str(pki["key"]),
        "client_ca_file": str(pki["ca"]), "client_auth_type": "RequireAndVerifyClientCert"}}))
    address = f"127.0.0.1:{port_or_free(0)}"
    with_client = ssl.create_default_context(cafile=str(pki["cert"]))
    with_client.load_cert_chain(pki["client"], pki["client_key"])
    without = ssl.create_default_context(cafile=str(pki["cert"]))
    url = f"https://{address}"
    with command_process("poolscope.scheduler_bridge", "--prometheus-url=http://127.0.0.1:9",
                         f"--web.listen-address={address}", f"--web.config.file={config}"):
        eventually(lambda: healthz(url, with_client), lambda s: s == 200, 30,
                   "/healthz with a client certificate")
        assert healthz(url, without) == 0  # the handshake fails without one
        # A certificate its CA did not sign is no better than none.
        stranger = ssl.create_default_context(cafile=str(pki["cert"]))
        stranger.load_cert_chain(pki["cert"], pki["key"])
        assert healthz(url, stranger) == 0
        # ... while the bridge still serves a client it trusts: refused, not dead.
        assert healthz(url, with_client) == 200
