"""--web.config.file: the exporter-toolkit format, every key known, every mistake refused."""

from __future__ import annotations

import ssl
from pathlib import Path

import bcrypt
import pytest
import yaml

from poolscope.service import webconfig
from poolscope.service.argtypes import UsageError
from tests.reliability.stack import self_signed_certificate

# The example file of exporter-toolkit's docs (docs/web-config.yml), with its hashes.
TOOLKIT_EXAMPLE = """\
tls_server_config:
  cert_file: server.crt
  key_file: server.key

basic_auth_users:
  alice: $2y$10$mDwo.lAisC94iLAyP81MCesa29IzH37oigHC/42V2pdJlUprsJPze
  bob: $2y$10$hLqFl9jSjoAAy95Z/zw8Ye8wkdMBM8c5Bn1ptYqP/AXyV0.oy0S8m

basic_auth_excluded_paths:
- /-/healthy
- /-/ready
"""


VALID_HASH = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()


def test_a_costly_hash_is_checked_without_paying_its_cost(tmp_path: Path) -> None:
    """Cost 31 would take days per check; the start-up check tries the salt at cost 4."""
    costly = VALID_HASH.replace("$04$", "$31$")
    config = webconfig.load(write(tmp_path, {"basic_auth_users": {"alice": costly}}))
    assert config.basic_users["alice"] == costly.encode()


@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed_certificate(tmp_path_factory.mktemp("tls"))


def write(tmp_path: Path, doc: dict | str) -> Path:
    path = tmp_path / "web.yml"
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return path


def test_the_toolkit_example_loads_with_paths_relative_to_the_file(
        tmp_path: Path, pem: tuple[Path, Path]) -> None:
    (tmp_path / "server.crt").write_bytes(pem[0].read_bytes())
    (tmp_path / "server.key").write_bytes(pem[1].read_bytes())
    config = webconfig.load(write(tmp_path, TOOLKIT_EXAMPLE))
    assert isinstance(config.tls, ssl.SSLContext)
    assert config.tls.minimum_version == ssl.TLSVersion.TLSv1_2  # the format's default
    assert config.tls.verify_mode == ssl.CERT_NONE
    assert set(config.basic_users) == {"alice", "bob"}
    assert config.open_paths == {"/-/healthy", "/-/ready"}


def test_inline_pem_and_client_ca(tmp_path: Path, pem: tuple[Path, Path]) -> None:
    config = webconfig.load(write(tmp_path, {"tls_server_config": {
        "cert": pem[0].read_text(), "key": pem[1].read_text(),
        "client_ca_file": str(pem[0]), "client_auth_type": "RequireAndVerifyClientCert",
        "min_version": "TLS13"}}))
    assert config.tls is not None and config.tls.verify_mode == ssl.CERT_REQUIRED
    assert config.tls.minimum_version == ssl.TLSVersion.TLSv1_3


def test_a_bcrypt_hash_made_here_checks_its_password(tmp_path: Path) -> None:
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    config = webconfig.load(write(tmp_path, {"basic_auth_users": {"prom": hashed}}))
    assert bcrypt.checkpw(b"s3cret", config.basic_users["prom"])
    assert config.tls is None


@pytest.mark.parametrize(("doc", "named"), [
    ({"tls_server_config": {"cert_file": "c", "key_file": "k", "cipher_suites": ["X"]}},
     "cipher_suites"),
    ({"tls_server_config": {"cert_file": "c"}}, "needs a certificate and its key"),
    ({"tls_server_config": {"cert_file": "c", "key_file": "k",
                            "client_auth_type": "RequireAnyClientCert"}}, "RequireAnyClientCert"),
    ({"tls_server_config": {"cert_file": "CERT", "key_file": "KEY",
                            "client_auth_type": "RequireAndVerifyClientCert"}},
     "needs client_ca_file"),
    ({"tls_server_config": {"cert_file": "CERT", "key_file": "KEY", "min_version": "TLS14"}},
     "min_version"),
    ({"tls_server_config": {"cert_file": "missing.pem", "key_file": "KEY"}}, "tls_server_config"),
    ({"tls_sever_config": {}}, "unknown key tls_sever_config"),
    ({"http_server_config": {"http3": True}}, "http_server_config.http3"),
    ({"http_server_config": {"headers": {"Set-Cookie": "x"}}}, "headers"),
    ({"basic_auth_users": {"alice": "plaintext-password"}}, "not a bcrypt hash"),
    # The pattern of a hash, but a cost bcrypt refuses, or a salt it cannot decode:
    # every check would fail.
    ({"basic_auth_users": {"alice": VALID_HASH.replace("$04$", "$03$")}},
     "basic_auth_users.alice"),
    ({"basic_auth_users": {"alice": VALID_HASH.replace("$04$", "$99$")}},
     "basic_auth_users.alice"),
    ({"basic_auth_users": {"alice": "$2b$10$" + "a" * 53}}, "basic_auth_users.alice"),
    ({"tls_server_config": {"cert_file": "CERT", "key_file": "KEY", "client_ca_file": "CERT"}},
     "client CAs are given but client_auth_type is NoClientCert"),
    ({"basic_auth_users": ["alice"]}, "basic_auth_users"),
    ({"rate_limit": {"interval": "1s", "burst": 5}}, "rate_limit"),
    ("tls_server_config: [unclosed", "not YAML"),
    ("- a list", "must hold a mapping"),
])
def test_a_bad_file_is_refused_naming_the_flag_and_the_key(
        tmp_path: Path, pem: tuple[Path, Path], doc: dict | str, named: str) -> None:
    if isinstance(doc, dict) and "tls_server_config" in doc:
        doc["tls_server_config"] = {k: {"CERT": str(pem[0]), "KEY": str(pem[1])}.get(v, v)
                                    if isinstance(v, str) else v
                                    for k, v in doc["tls_server_config"].items()}
    with pytest.raises(UsageError) as refused:
        webconfig.load(write(tmp_path, doc))
    assert str(refused.value).startswith("--web.config.file: ") and named in str(refused.value)


def test_an_unreadable_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"--web\.config\.file: cannot read"):
        webconfig.load(tmp_path / "absent.yml")


def test_tls_from_both_the_file_and_the_old_flags_is_refused(
        tmp_path: Path, pem: tuple[Path, Path]) -> None:
    from poolscope.exporters.instance.config import parse

    path = write(tmp_path, {"tls_server_config": {"cert_file": str(pem[0]),
                                                  "key_file": str(pem[1])}})
    ids = ["--instance-id=i", "--proxy-id=p"]
    with pytest.raises(UsageError) as refused:
        parse([*ids, f"--web.config.file={path}", f"--tls-cert={pem[0]}", f"--tls-key={pem[1]}"])
    assert "--tls-cert" in str(refused.value) and "--web.config.file" in str(refused.value)
    assert parse([*ids, f"--web.config.file={path}"]).service.tls is not None
    assert parse([*ids, f"--tls-cert={pem[0]}", f"--tls-key={pem[1]}"]).service.tls is not None
