"""`pip install .` installs one `poolscope` namespace and everything a user runs from it.

A wheel is built from the checkout, offline (`--no-build-isolation`, with the
setuptools the dev extras pin), and read back: nothing lands in site-packages beside
`poolscope`, no module of the mapped folders is left out (a new subpackage forgotten
in pyproject.toml would be), the JSON Schema and the status pages' templates travel with
the code, and every console script names a function the wheel holds.
"""

from __future__ import annotations

import ast
import configparser
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("contract", "service", "exporters", "bridge", "scheduler_bridge", "proxy_bridge")
NOT_INSTALLED = ("deploy", "dashboards", "bench", "rules", "tests")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    # From a copy: setuptools builds in the source tree, and a build/ left there by an
    # earlier layout would put modules that no longer exist into the wheel.
    source = tmp_path_factory.mktemp("source") / "poolscope"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".*", "build", "*.egg-info", "__pycache__", *NOT_INSTALLED))
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(out), str(source)],
                   check=True, capture_output=True, timeout=300)
    [built] = out.glob("poolscope-*.whl")
    return zipfile.ZipFile(built)


def test_only_the_poolscope_namespace_is_installed(wheel: zipfile.ZipFile) -> None:
    tops = {name.split("/")[0] for name in wheel.namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"poolscope"}
    assert not (tops & set(NOT_INSTALLED))


def test_every_module_of_the_mapped_folders_is_in_the_wheel(wheel: zipfile.ZipFile) -> None:
    expected = {f"poolscope/{p.relative_to(ROOT).as_posix()}"
                for folder in FOLDERS for p in (ROOT / folder).rglob("*.py")
                if "__pycache__" not in p.parts}
    assert expected - set(wheel.namelist()) == set()
    assert "poolscope/bridge/schema/pool_summary.schema.json" in wheel.namelist()


def test_the_status_pages_templates_are_in_the_wheel(wheel: zipfile.ZipFile) -> None:
    # Package data, not modules: a bridge installed without them serves no status page.
    templates = ROOT / "scheduler_bridge" / "status" / "templates"
    expected = {f"poolscope/scheduler_bridge/status/templates/{p.name}"
                for p in templates.iterdir()}
    assert len(expected) > 1 and expected - set(wheel.namelist()) == set()


def test_every_console_script_names_a_function_in_the_wheel(wheel: zipfile.ZipFile) -> None:
    [entry_points] = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    config = configparser.ConfigParser()
    config.read_string(wheel.read(entry_points).decode())
    scripts = dict(config["console_scripts"])
    assert scripts, "no console scripts"
    for script, target in scripts.items():
        module, _, function = target.partition(":")
        source = wheel.read(module.replace(".", "/") + ".py").decode()
        defined = {n.name for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)}
        assert function in defined, f"{script}: {target}"
