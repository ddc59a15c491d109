"""`--web.config.file`: the exporter-toolkit web configuration, read by a Python service.

Operators who run node_exporter or any exporter-toolkit service already have this
file (TLS certificate and key, client CAs, basic-auth users with bcrypt hashes), and
Prometheus' scrape configs already speak to it; the same file works here. It is read
once, at start-up, so every mistake is a one-line refusal before anything listens
(exporter-toolkit reads it per request; here a certificate renewal needs a restart).

Every key of the format is known. Those Python's TLS cannot honour are refused by
name rather than ignored, since a file that asks for more than it gets would
otherwise serve less than it says: `RequestClientCert` and `RequireAnyClientCert`
(Python asks only for certificates it verifies), `cipher_suites` and
`curve_preferences` (Go names), `client_allowed_sans` and `rate_limit`. HTTP/2 is
not served (`http2` is accepted and has no effect: clients fall back to HTTP/1.1).
"""

from __future__ import annotations

import re
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bcrypt
import yaml

from poolscope.service.argtypes import UsageError

FLAG = "--web.config.file"
_TLS_KEYS = frozenset({"cert", "key", "client_ca", "cert_file", "key_file", "client_auth_type",
                       "client_ca_file", "client_allowed_sans", "min_version", "max_version",
                       "cipher_suites", "prefer_server_cipher_suites", "curve_preferences"})
_HTTP_KEYS = frozenset({"http2", "headers"})
_TOP_KEYS = frozenset({"tls_server_config", "http_server_config", "basic_auth_users",
                       "basic_auth_excluded_paths", "rate_limit"})
# The response headers the format lets a file set.
HEADERS = ("Content-Security-Policy", "X-Frame-Options", "X-Content-Type-Options",
           "X-XSS-Protection", "Strict-Transport-Security")
_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
             "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
                "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
_BCRYPT = re.compile(rb"\$2[aby]\$\d\d\$[./A-Za-z0-9]{53}")


@dataclass(frozen=True)
class WebConfig:
    tls: ssl.SSLContext | None = None
    basic_users: Mapping[str, bytes] = field(default_factory=dict)
    open_paths: frozenset[str] = frozenset()
    headers: Mapping[str, str] = field(default_factory=dict)


def _refuse(message: str) -> UsageError:
    return UsageError(f"{FLAG}: {message}")


def _section(doc: Mapping[str, Any], name: str, keys: frozenset[str]) -> dict[str, Any]:
    section = doc.get(name) or {}
    if not isinstance(section, dict):
        raise _refuse(f"{name} must be a mapping")
    unknown = sorted(set(section) - keys)
    if unknown:
        raise _refuse(f"unknown key {name}.{unknown[0]}")
    return section


def _unsupported(tls: Mapping[str, Any]) -> None:
    for key in ("cipher_suites", "curve_preferences", "client_allowed_sans"):
        if tls.get(key):
            raise _refuse(f"tls_server_config.{key} is not supported by this server; "
                          "remove it (the defaults of Python's TLS apply)")


def _pem(tls: Mapping[str, Any], inline: str, path_key: str, base: Path) -> Path | str | None:
    """The file named, or the inline PEM; never both."""
    if tls.get(inline) and tls.get(path_key):
        raise _refuse(f"tls_server_config: give {inline} or {path_key}, not both")
    if tls.get(path_key):
        return base / str(tls[path_key])
    return str(tls[inline]) if tls.get(inline) else None


def _tls_context(tls: Mapping[str, Any], base: Path) -> ssl.SSLContext | None:
    if not tls:
        return None
    _unsupported(tls)
    cert, key = _pem(tls, "cert", "cert_file", base), _pem(tls, "key", "key_file", base)
    if cert is None or key is None:
        raise _refuse("tls_server_config needs a certificate and its key "
                      "(cert_file and key_file, or cert and key)")
    auth_type = str(tls.get("client_auth_type") or "NoClientCert")
    if auth_type not in _CLIENT_AUTH:
        hint = (" (Python's TLS asks only for client certificates it verifies: use "
                "RequireAndVerifyClientCert or VerifyClientCertIfGiven)"
                if auth_type in ("RequestClientCert", "RequireClientCert",
                                 "RequireAnyClientCert") else "")
        raise _refuse(f"tls_server_config.client_auth_type {auth_type!r} is not supported{hint}")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    versions = {}
    for bound in ("min_version", "max_version"):
        name = tls.get(bound)
        if name is not None and name not in _VERSIONS:
            raise _refuse(f"tls_server_config.{bound} {name!r}: expected one of "
                          f"{', '.join(_VERSIONS)}")
        versions[bound] = _VERSIONS[name or ("TLS12" if bound == "min_version" else "TLS13")]
    try:
        context.minimum_version, context.maximum_version = (versions["min_version"],
                                                            versions["max_version"])
        _load_chain(context, cert, key)
        client_ca = _pem(tls, "client_ca", "client_ca_file", base)
        if client_ca is not None:
            if isinstance(client_ca, Path):
                context.load_verify_locations(cafile=client_ca)
            else:
                context.load_verify_locations(cadata=client_ca)
    except (OSError, ssl.SSLError, ValueError) as e:
        raise _refuse(f"tls_server_config: {e}") from e
    if _CLIENT_AUTH[auth_type] != ssl.CERT_NONE and client_ca is None:
        raise _refuse(f"tls_server_config.client_auth_type {auth_type} needs client_ca_file")
    if _CLIENT_AUTH[auth_type] == ssl.CERT_NONE and client_ca is not None:
        # As exporter-toolkit: a CA without a policy would leave mutual TLS off unsaid.
        raise _refuse("tls_server_config: client CAs are given but client_auth_type is "
                      f"{auth_type}: set RequireAndVerifyClientCert (or VerifyClientCertIfGiven)")
    context.verify_mode = _CLIENT_AUTH[auth_type]
    if tls.get("prefer_server_cipher_suites", True):
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    return context


def _load_chain(context: ssl.SSLContext, cert: Path | str, key: Path | str) -> None:
    """load_cert_chain reads files only: an inline PEM goes through a private temporary
    file that is gone when this returns."""
    with tempfile.TemporaryDirectory() as folder:
        paths = []
        for name, pem in (("cert.pem", cert), ("key.pem", key)):
            if isinstance(pem, Path):
                paths.append(pem)
            else:
                path = Path(folder) / name
                path.write_text(pem)
                paths.append(path)
        context.load_cert_chain(paths[0], paths[1])


def _users(doc: Mapping[str, Any]) -> dict[str, bytes]:
    users = doc.get("basic_auth_users") or {}
    if not isinstance(users, dict):
        raise _refuse("basic_auth_users must map user names to bcrypt hashes")
    hashes = {}
    for user, hashed in users.items():
        encoded = str(hashed).encode()
        if not isinstance(user, str) or ":" in user or not user:
            raise _refuse(f"basic_auth_users: {user!r} cannot be a user name")
        if not _BCRYPT.fullmatch(encoded) or not _usable(encoded):
            raise _refuse(f"basic_auth_users.{user}: not a bcrypt hash "
                          "(make one with `htpasswd -nBC 10 \"\" | tr -d ':\\n'`)")
        hashes[user] = encoded
    return hashes


def _usable(hashed: bytes) -> bool:
    """Whether bcrypt can check a password against `hashed`: a cost outside 4..31 or
    a malformed salt passes the pattern yet fails every check, which would be a
    permanent 401 that nothing at start-up explains. The salt is tried at cost 4, so
    a hash of cost 16 does not hold up the start for seconds."""
    cost = int(hashed[4:6])
    if not 4 <= cost <= 31:
        return False
    try:
        bcrypt.checkpw(b"", hashed[:4] + b"04" + hashed[6:])
    except ValueError:
        return False
    return True


def _rate_limit(doc: Mapping[str, Any]) -> None:
    limit = doc.get("rate_limit") or {}
    if not isinstance(limit, dict):
        raise _refuse("rate_limit must be a mapping")
    if str(limit.get("interval", "0")).strip() not in ("0", "0s", ""):
        raise _refuse("rate_limit is not supported by this server; the connection cap "
                      "(--max-connections) bounds what one client can hold")


def load(path: Path) -> WebConfig:
    """The web config in `path`, checked; raises UsageError naming the flag and the key.
    Relative file names in it are relative to the file's folder, as exporter-toolkit
    resolves them."""
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except (OSError, UnicodeDecodeError) as e:
        raise _refuse(f"cannot read {path}: {e}") from e
    except yaml.YAMLError as e:
        raise _refuse(f"{path} is not YAML: {str(e).splitlines()[0]}") from e
    if not isinstance(doc, dict):
        raise _refuse(f"{path} must hold a mapping")
    unknown = sorted(set(doc) - _TOP_KEYS)
    if unknown:
        raise _refuse(f"unknown key {unknown[0]}")
    tls = _section(doc, "tls_server_config", _TLS_KEYS)
    http = _section(doc, "http_server_config", _HTTP_KEYS)
    headers = http.get("headers") or {}
    if not isinstance(headers, dict) or set(headers) - set(HEADERS):
        raise _refuse(f"http_server_config.headers may set only {', '.join(HEADERS)}")
    excluded = doc.get("basic_auth_excluded_paths") or []
    if not isinstance(excluded, list) or not all(
            isinstance(p, str) and p.startswith("/") for p in excluded):
        raise _refuse("basic_auth_excluded_paths must be a list of paths starting with /")
    _rate_limit(doc)
    return WebConfig(tls=_tls_context(tls, path.parent), basic_users=_users(doc),
                     open_paths=frozenset(excluded),
                     headers={k: str(v) for k, v in headers.items() if v})
