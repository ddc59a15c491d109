"""constraints.txt is the lock: what CI tests, `make` installs and the image ships.

pyproject.toml's floors say which releases the code works with; the lock says which
ones were tested. They must agree (every requirement pinned, each pin inside its
floor), and .venv must hold exactly the lock, or the suite tests versions no one
ships, or ships versions no one tested.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = ROOT / "constraints.txt"
PIN = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;#]+)")


def _pyproject() -> dict:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


def _requirements() -> list[Requirement]:
    project = _pyproject()["project"]
    specs = [*project["dependencies"],
             *(s for extra in project["optional-dependencies"].values() for s in extra)]
    return [Requirement(s) for s in specs]


def _lock() -> dict[str, Version]:
    """Name -> pinned version; any line but `name==version` is a broken lock."""
    pins: dict[str, Version] = {}
    for n, line in enumerate(CONSTRAINTS.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = PIN.fullmatch(line)
        assert match, f"constraints.txt:{n}: not NAME==VERSION: {line!r}"
        name = canonicalize_name(match["name"])
        assert name not in pins, f"constraints.txt:{n}: {name} pinned twice"
        pins[name] = Version(match["version"])
    return pins


LOCK = _lock()


def test_the_lock_pins_no_local_project() -> None:
    """`pip freeze` lists an editable install as `-e ...`; pinning poolscope itself
    would make `pip install -c constraints.txt .` refuse any other version."""
    assert "poolscope" not in LOCK
    assert {"pip", "setuptools"} <= LOCK.keys()  # the Makefile and install.sh pin both


@pytest.mark.parametrize("requirement", _requirements(), ids=str)
def test_every_requirement_is_pinned_inside_its_specifier(requirement: Requirement) -> None:
    name = canonicalize_name(requirement.name)
    assert name in LOCK, f"{requirement} is not pinned in constraints.txt"
    assert requirement.specifier.contains(LOCK[name], prereleases=True), (
        f"constraints.txt pins {name}=={LOCK[name]}, outside pyproject's {requirement}")


def test_the_venv_holds_exactly_the_lock() -> None:
    """Nothing installed by hand that the lock does not name, nothing at another
    version: else the suite passes on versions `make` would not install."""
    if sys.prefix == sys.base_prefix:
        pytest.skip("not running in a virtual environment: nothing to compare")
    installed = {canonicalize_name(d.metadata["Name"]): Version(d.version)
                 for d in importlib.metadata.distributions()}
    installed.pop("poolscope", None)
    assert {n: (installed.get(n), LOCK.get(n)) for n in installed.keys() | LOCK.keys()
            if installed.get(n) != LOCK.get(n)} == {}
