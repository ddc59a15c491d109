"""deploy/systemd: every unit runs its service with flags the service accepts,
hardened, and passes systemd's own checks where systemd-analyze exists."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.prometheus import REPO
from poolscope.service.argtypes import ServiceParser, env_name
from tests.deploy.clis import check_command, console_scripts
from tests.deploy.test_console_flags import parser_of
from tests.deploy.unit_files import (
    Unit,
    expand_command,
    parse_env_file,
    parse_unit,
    referenced_variables,
)

SYSTEMD_DIR = REPO / "deploy" / "systemd"
UNITS = sorted(SYSTEMD_DIR.glob("*.service"))
INSTALL_BIN = "/opt/poolscope/bin/"
EXAMPLE_INSTANCE = "example"
# systemd-analyze security's exposure, times ten: 2.0 is well inside "OK".
MAX_EXPOSURE = 20

HARDENING = {
    "NoNewPrivileges": "yes",
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "PrivateTmp": "yes",
    "CapabilityBoundingSet": "",
    "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
    "RestrictSUIDSGID": "yes",
}


def _example_env(unit: Unit) -> Path:
    """instance-%i.env -> instance.env.example, next to the unit."""
    name = Path(unit.one("Service", "EnvironmentFile")).name
    return SYSTEMD_DIR / f"{name.replace('-%i', '')}.example"


def test_one_unit_per_service() -> None:
    assert [p.name for p in UNITS] == ["poolscope-instance-exporter@.service",
                                        "poolscope-proxy-bridge@.service",
                                        "poolscope-scheduler-bridge.service"]


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_required_settings(path: Path) -> None:
    unit = parse_unit(path)
    assert unit.one("Unit", "Description")
    assert unit.one("Service", "Restart") == "on-failure"
    assert unit.one("Service", "RestartPreventExitStatus") == "2"  # bad flags: no retry loop
    assert unit.one("Install", "WantedBy") == "multi-user.target"
    assert unit.one("Service", "ExecStart").startswith(INSTALL_BIN)


def test_the_exporter_that_reads_other_programs_pages_has_a_memory_ceiling() -> None:
    unit = parse_unit(SYSTEMD_DIR / "poolscope-instance-exporter@.service")
    assert unit.one("Service", "MemoryMax") == "256M"


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_hardened(path: Path) -> None:
    unit = parse_unit(path)
    for key, expected in HARDENING.items():
        assert unit.one("Service", key) == expected, key
    assert unit.values("Service", "DynamicUser") == ["yes"] or unit.values("Service", "User")


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_templates_and_only_templates_use_the_instance_name(path: Path) -> None:
    unit = parse_unit(path)
    env_file = unit.one("Service", "EnvironmentFile")
    assert env_file.startswith("/etc/poolscope/")
    assert ("%i" in env_file) == unit.is_template
    assert ("%i" in unit.one("Unit", "Description")) == unit.is_template


def _read_by_the_service(unit: Unit) -> set[str]:
    """The POOLSCOPE_* variables the unit's service reads itself, one per flag."""
    script = unit.one("Service", "ExecStart").split()[0].rsplit("/", 1)[-1]
    parser = parser_of(console_scripts()[script])
    assert isinstance(parser, ServiceParser)
    return {env_name(a) for a in parser.configurable()}


def _start(unit: Unit, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Parse the unit's argv as the service would, with the environment systemd gives it."""
    for name in [n for n in os.environ if n.startswith("POOLSCOPE_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    check_command(expand_command(unit.one("Service", "ExecStart"), env, EXAMPLE_INSTANCE))


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_example_env_starts_the_service(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    unit = parse_unit(path)
    env = parse_env_file(_example_env(unit))
    used = referenced_variables(unit.one("Service", "ExecStart"))
    assert used - env.keys() == set(), "ExecStart uses variables the example does not set"
    assert env.keys() - used - _read_by_the_service(unit) == set(), \
        "the example sets variables nothing reads"
    _start(unit, env, monkeypatch)


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_a_bad_extra_flag_is_caught(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The argv check sees the word-split extra arguments, not just the fixed ones."""
    unit = parse_unit(path)
    env = parse_env_file(_example_env(unit))
    env["POOLSCOPE_EXTRA_ARGS"] += " --no-such-flag"
    with pytest.raises(AssertionError, match="no-such-flag"):
        _start(unit, env, monkeypatch)


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_a_bad_value_in_the_env_file_is_caught(path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The settings the service reads itself are checked as its flags are."""
    unit = parse_unit(path)
    env = parse_env_file(_example_env(unit))
    env["POOLSCOPE_WEB_LISTEN_ADDRESS"] = "nowhere"
    with pytest.raises(AssertionError, match="POOLSCOPE_WEB_LISTEN_ADDRESS"):
        _start(unit, env, monkeypatch)


def test_an_empty_engine_url_leaves_the_engine_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """The instance example says an empty POOLSCOPE_ENGINE_METRICS_URL means no engine
    series; systemd passes it as an empty variable, which counts as unset."""
    unit = parse_unit(SYSTEMD_DIR / "poolscope-instance-exporter@.service")
    env = {**parse_env_file(_example_env(unit)), "POOLSCOPE_ENGINE_METRICS_URL": ""}
    _start(unit, env, monkeypatch)


def _systemd_analyze() -> str:
    found = shutil.which("systemd-analyze")
    if not found:
        pytest.skip("systemd-analyze not installed; the structural checks above still ran")
    return found


def _installed_copy(path: Path, into: Path, replace: tuple[str, str] = ("", "")) -> str:
    """Copy the unit with ExecStart pointing at this venv's console scripts
    (systemd-analyze checks the binary exists); return the name to verify."""
    text = path.read_text().replace(INSTALL_BIN, f"{Path(sys.executable).parent}/")
    (into / path.name).write_text(text.replace(*replace))
    return path.name.replace("@.", f"@{EXAMPLE_INSTANCE}.")


def _verify(unit_dir: Path, name: str) -> list[str]:
    done = subprocess.run([_systemd_analyze(), "verify", name], cwd=unit_dir,
                          capture_output=True, text=True, timeout=60)
    complaints = [line for line in (done.stdout + done.stderr).splitlines()
                  if "poolscope-" in line]
    if done.returncode:
        complaints.append(f"exit status {done.returncode}")
    return complaints


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_systemd_analyze_verify(path: Path, tmp_path: Path) -> None:
    assert _verify(tmp_path, _installed_copy(path, tmp_path)) == []


def test_systemd_analyze_verify_catches_a_typo(tmp_path: Path) -> None:
    name = _installed_copy(UNITS[0], tmp_path, ("ProtectSystem=", "ProtectSytem="))
    assert any("ProtectSytem" in line for line in _verify(tmp_path, name))


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_systemd_analyze_security(path: Path, tmp_path: Path) -> None:
    name = _installed_copy(path, tmp_path)
    done = subprocess.run([_systemd_analyze(), "security", "--offline=true",
                           f"--threshold={MAX_EXPOSURE}", name],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
