"""deploy/container/: the image the Kubernetes manifests name, checked without a
container runtime.

The Dockerfile's one build step is deploy/container/install.sh, so the test runs that
script: on the files .dockerignore lets into the build context, into a fresh virtual
environment, with pip offline. Its packages come from a wheelhouse repacked from
.venv's installed distributions, which constraints.txt pins, so the resolution, the
build of the project and the install are pip's own, as in the image; only the index
differs. Then every console script must start from that environment, and the
Dockerfile and the manifests must agree with it: a numeric non-root user, the
default ports exposed, and each container running a script the image has, listening
on a port its pod declares.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import os
import posixpath
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from poolscope.service import ports

ROOT = Path(__file__).resolve().parents[2]
CONTAINER = ROOT / "deploy" / "container"
DOCKERFILE = CONTAINER / "Dockerfile"
KUBE_DIR = ROOT / "deploy" / "kubernetes"
MANIFESTS = sorted([*KUBE_DIR.glob("*.yaml"), *KUBE_DIR.glob("examples/*.yaml")])
IMAGE = "poolscope"
REVISION = "0123456789ab"
LISTEN_FLAGS = ("--listen", "--web.listen-address")
Doc = dict[str, Any]


def _pyproject() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = version.strip()
    return pins


# --- the build context -------------------------------------------------------------

def _glob_regex(pattern: str) -> str:
    """A .dockerignore pattern as Docker's matcher reads it: Go's filepath.Match,
    where `*` and `?` stop at `/`, plus `**` for any number of directories."""
    if set(pattern) & set("[]\\"):
        raise ValueError(f"{pattern!r}: this test reads no character classes or escapes")
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return out


def _ignore_rules() -> list[tuple[bool, str, re.Pattern[str]]]:
    """(is an exception, pattern, regex) per line, in order: the last line that
    matches a path, or one of its parent directories, decides."""
    rules = []
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        exception = line.startswith("!")
        pattern = posixpath.normpath(line.removeprefix("!").strip()).lstrip("/")
        rules.append((exception, pattern, re.compile(_glob_regex(pattern))))
    return rules


def _excluded(rules: list[tuple[bool, str, re.Pattern[str]]], path: str) -> bool:
    parts = path.split("/")
    candidates = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    excluded = False
    for exception, _, regex in rules:
        if any(regex.fullmatch(c) for c in candidates):
            excluded = not exception
    return excluded


def _context_files() -> Iterator[str]:
    """The paths `docker build .` sends from the repository root. An excluded folder
    is not entered unless an exception names something under it, as Docker walks."""
    rules = _ignore_rules()
    for folder, dirs, files in os.walk(ROOT):
        rel = Path(folder).relative_to(ROOT).as_posix()
        prefix = "" if rel == "." else f"{rel}/"
        dirs[:] = [d for d in dirs if not _excluded(rules, prefix + d) or any(
            e and p.startswith(f"{prefix}{d}/") for e, p, _ in rules)]
        for name in files:
            if not _excluded(rules, prefix + name):
                yield prefix + name


def test_the_build_context_holds_the_sources_and_no_local_state() -> None:
    context = set(_context_files())
    assert {"pyproject.toml", "constraints.txt", "deploy/container/install.sh"} <= context
    tops = {p.split("/")[0] for p in context}
    assert {".git", ".venv", "build", "tests", "poolscope.egg-info"}.isdisjoint(tops)
    assert not [p for p in context if "__pycache__" in p or p.endswith(".pyc")]
    folders = set(_pyproject()["tool"]["setuptools"]["package-dir"].values())
    assert folders <= tops


# --- the image's environment, built by install.sh ----------------------------------

def _runtime_closure() -> dict[str, importlib.metadata.Distribution]:
    """pyproject's runtime requirements, pip and setuptools (install.sh pins both),
    and everything they require, as .venv has them."""
    todo = [*_pyproject()["project"]["dependencies"], "pip", "setuptools"]
    found: dict[str, importlib.metadata.Distribution] = {}
    while todo:
        requirement = Requirement(todo.pop())
        name = canonicalize_name(requirement.name)
        if name in found:
            continue
        found[name] = dist = importlib.metadata.distribution(name)
        for spec in dist.requires or []:
            needed = Requirement(spec)
            if needed.marker is None or needed.marker.evaluate({"extra": ""}):
                todo.append(spec)
    return found


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"sha256={digest.decode()}"


def _repack(dist: importlib.metadata.Distribution, out: Path) -> Path:
    """A wheel of an installed distribution: its files under site-packages and its
    metadata. What it installed elsewhere is left out: console scripts, which pip
    writes anew from entry_points.txt, and data files, which no runtime dependency
    has."""
    files = [f for f in dist.files or [] if f.parts[0] != ".."
             and "__pycache__" not in f.parts and f.suffix != ".pyc"]
    [info] = {f.parts[0] for f in files if f.parts[0].endswith(".dist-info")}
    tags = [line.split(":", 1)[1].strip()
            for line in dist.read_text("WHEEL").splitlines() if line.startswith("Tag:")]
    name = re.sub(r"[-_.]+", "_", dist.metadata["Name"])
    wheel = out / f"{name}-{dist.version}-{tags[0]}.whl"
    skipped = {f"{info}/{n}" for n in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")}
    record = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as zf:
        for f in files:
            path = f.as_posix()
            if path in skipped:
                continue
            data = Path(str(dist.locate_file(f))).read_bytes()
            zf.writestr(path, data)
            record.append(f"{path},{_record_hash(data)},{len(data)}")
        zf.writestr(f"{info}/RECORD", "\n".join([*record, f"{info}/RECORD,,"]) + "\n")
    return wheel


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The prefix install.sh filled, as the Dockerfile runs it, but offline."""
    wheelhouse = tmp_path_factory.mktemp("wheelhouse")
    for dist in _runtime_closure().values():
        _repack(dist, wheelhouse)
    src = tmp_path_factory.mktemp("context")
    for rel in _context_files():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, src / rel)
    prefix = tmp_path_factory.mktemp("image") / "poolscope"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
    env |= {"PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1",
            "PIP_FIND_LINKS": str(wheelhouse), "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_NO_CACHE_DIR": "1", "PYTHON": sys.executable}
    done = subprocess.run(["sh", str(src / "deploy/container/install.sh"), str(prefix),
                           REVISION], env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    return prefix


def _in_image(image: Path, code: str) -> str:
    done = subprocess.run([str(image / "bin" / "python"), "-c", code],
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.strip()


def _image_scripts(image: Path) -> set[str]:
    names = _in_image(image, "import importlib.metadata as m; print(' '.join(e.name for e in "
                             "m.distribution('poolscope').entry_points "
                             "if e.group == 'console_scripts'))")
    return set(names.split())


def test_the_image_has_every_console_script(image: Path) -> None:
    assert _image_scripts(image) == set(_pyproject()["project"]["scripts"])


@pytest.mark.parametrize("script", sorted(_pyproject()["project"]["scripts"]))
def test_every_console_script_starts_from_the_image(image: Path, script: str) -> None:
    done = subprocess.run([str(image / "bin" / script), "--help"], capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert "usage" in done.stdout.lower()


def test_the_image_holds_exactly_the_pinned_versions(image: Path) -> None:
    installed = _in_image(image, "import importlib.metadata as m; print('\\n'.join("
                                 "f\"{d.metadata['Name']}=={d.version}\" "
                                 "for d in m.distributions()))")
    pins = _pins()
    versions = {canonicalize_name(n): v for n, _, v in
                (line.partition("==") for line in installed.splitlines())}
    assert versions.pop("poolscope") == _pyproject()["project"]["version"]
    assert {n: (v, pins.get(n)) for n, v in versions.items() if pins.get(n) != v} == {}
    assert "pytest" not in versions  # the dev extra stays out of the image


def test_the_image_reports_the_revision_it_was_built_from(image: Path) -> None:
    assert _in_image(image, "from poolscope.service import build; "
                            "print(build.current().revision)") == REVISION


def test_install_refuses_a_revision_it_could_not_write(tmp_path: Path) -> None:
    done = subprocess.run(["sh", str(CONTAINER / "install.sh"), str(tmp_path / "p"),
                           "HEAD; rm -rf /"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "REVISION" in done.stderr
    assert not (tmp_path / "p").exists()


# --- the Dockerfile ----------------------------------------------------------------

def _final_stage() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the stage the image is, continuations joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    stages: list[list[tuple[str, str]]] = [[]]
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        instruction, _, args = line.strip().partition(" ")
        if instruction.upper() == "FROM":
            stages.append([])
        stages[-1].append((instruction.upper(), args.strip()))
    return stages[-1]


def _all(instruction: str) -> list[str]:
    return [args for i, args in _final_stage() if i == instruction]


def test_the_image_runs_as_a_numeric_non_root_user() -> None:
    user = _all("USER")[-1]
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) != 0, user
    assert not gid or (gid.isdigit() and int(gid) != 0), user


def test_the_image_exposes_the_default_ports() -> None:
    exposed = {int(p.split("/")[0]) for args in _all("EXPOSE") for p in args.split()}
    defaults = {v for k, v in vars(ports).items() if k.isupper() and isinstance(v, int)}
    assert exposed == defaults


def test_the_console_scripts_are_on_path_without_a_shell() -> None:
    """The build stage's one step is install.sh into the prefix that the image
    copies and whose bin/ leads PATH, and nothing runs through a shell or an
    entrypoint script."""
    text = DOCKERFILE.read_text()
    [install] = re.findall(r"^RUN (.*install\.sh.*)$", text, re.MULTILINE)
    prefix = install.split("install.sh", 1)[1].split()[0]
    assert f"--from=build {prefix} {prefix}" in _all("COPY")
    env = dict(kv.split("=", 1) for args in _all("ENV") for kv in args.split())
    assert env["PATH"].split(":")[0] == f"{prefix}/bin"
    assert not _all("ENTRYPOINT")
    for args in _all("CMD"):
        assert args.startswith("["), f"CMD {args}: exec form, no shell"


# --- the manifests -----------------------------------------------------------------

def _containers(node: Any) -> Iterator[Doc]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                yield from value
            else:
                yield from _containers(value)
    elif isinstance(node, list):
        for item in node:
            yield from _containers(item)


def _poolscope_containers() -> list[tuple[str, Doc]]:
    found = []
    for path in MANIFESTS:
        for doc in yaml.safe_load_all(path.read_text()):
            for container in _containers(doc):
                if re.fullmatch(rf"{IMAGE}([:@].+)?", container.get("image", "")):
                    found.append((f"{path.relative_to(KUBE_DIR)}/{container['name']}",
                                  container))
    return found


POOLSCOPE_CONTAINERS = _poolscope_containers()


def test_the_manifests_run_the_image() -> None:
    assert len(POOLSCOPE_CONTAINERS) >= 3


def _listen_port(args: list[str]) -> int:
    addresses = [a.split("=", 1)[1] for a in args if a.startswith(tuple(f"{f}=" for f in
                                                                      LISTEN_FLAGS))]
    addresses += [args[i + 1] for i, a in enumerate(args[:-1]) if a in LISTEN_FLAGS]
    assert len(addresses) == 1, f"one listen flag ({' or '.join(LISTEN_FLAGS)}): {args}"
    return int(addresses[0].rpartition(":")[2])


@pytest.mark.parametrize("item", POOLSCOPE_CONTAINERS, ids=lambda item: item[0])
def test_each_container_runs_a_console_script_on_a_declared_port(
        image: Path, item: tuple[str, Doc]) -> None:
    """By name, not through a shell; and on the port its pod declares (without a
    listen flag a service listens on loopback, which nothing outside the pod reaches)."""
    _, container = item
    command = container.get("command")
    assert command and len(command) == 1, f"command: [SCRIPT], got {command}"
    assert command[0] in _image_scripts(image)
    port = _listen_port(list(container.get("args", [])))
    assert port in {p["containerPort"] for p in container.get("ports", [])}
