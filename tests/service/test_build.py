"""Which build a process runs: the REVISION file a build wrote, else the git checkout
that holds the package, else "unknown"; asked once per process."""

from __future__ import annotations

import importlib.metadata
import platform
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from poolscope.service import build

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")


@pytest.fixture(autouse=True)
def fresh_build() -> Iterator[None]:
    """Each test reads the build anew, and leaves none of its fakes cached."""
    build.current.cache_clear()
    yield
    build.current.cache_clear()


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A git work tree with one commit, holding a `service` package as ours does."""
    root = tmp_path / "checkout"
    (root / "service").mkdir(parents=True)
    (root / "service" / "build.py").write_text("# stand-in\n")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q",
        "-m", "one")
    return root


def test_the_version_line_names_program_version_revision_and_python() -> None:
    line = build.version_text("poolscope-proxy-bridge")
    b = build.current()
    assert line == (f"poolscope-proxy-bridge {importlib.metadata.version('poolscope')} "
                    f"(revision {b.revision}, python {platform.python_version()})")
    assert "\n" not in line


@needs_git
def test_in_this_checkout_the_revision_is_git_head() -> None:
    if (build.HERE / "REVISION").exists():
        pytest.skip("a build wrote service/REVISION into this checkout")
    head = git(build.HERE, "rev-parse", "--short=12", "HEAD")
    assert re.fullmatch(r"[0-9a-f]{12}", head)
    assert build.current().revision == head


@needs_git
def test_a_checkout_holding_the_package_gives_its_head(checkout: Path) -> None:
    head = git(checkout, "rev-parse", "--short=12", "HEAD")
    assert build.revision_from_git(checkout / "service") == head
    assert build.revision(checkout / "service") == head


@needs_git
def test_a_copy_installed_inside_another_checkout_is_not_that_checkouts_revision(
        checkout: Path) -> None:
    """A venv inside a checkout holds an installed copy that git would otherwise date."""
    installed = checkout / ".venv" / "lib" / "site-packages" / "poolscope" / "service"
    installed.mkdir(parents=True)
    assert build.revision_from_git(installed) is None
    assert build.revision(installed) == build.UNKNOWN


def test_outside_any_checkout_the_revision_is_unknown(tmp_path: Path) -> None:
    package = tmp_path / "poolscope" / "service"
    package.mkdir(parents=True)
    assert build.revision(package) == build.UNKNOWN


def test_without_git_the_revision_is_unknown(checkout: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(checkout / "no-bin-here"))
    assert build.revision(checkout / "service") == build.UNKNOWN


def test_a_git_that_hangs_is_given_up_on(tmp_path: Path, checkout: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "git"
    fake.write_text("#!/bin/sh\nexec sleep 60\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    assert build.revision_from_git(checkout / "service", timeout_s=0.2) is None


@needs_git
def test_the_revision_file_a_build_wrote_wins_over_git(checkout: Path) -> None:
    (checkout / "service" / "REVISION").write_text("0123456789ab\n")
    assert build.revision(checkout / "service") == "0123456789ab"


@pytest.mark.parametrize("content", ["", "\n", "two\nlines", "a b", "x" * 65, "\xe9t\xe9"])
def test_a_broken_revision_file_is_an_error_naming_it(tmp_path: Path, content: str) -> None:
    path = tmp_path / "REVISION"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(str(path))):
        build.revision(tmp_path)


def test_the_build_is_read_once_however_often_it_is_scraped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[Path] = []

    def counted(package_dir: Path, timeout_s: float = build.GIT_TIMEOUT_S) -> str:
        asked.append(package_dir)
        return "feedfacecafe"

    monkeypatch.setattr(build, "revision_from_file", lambda _: None)
    monkeypatch.setattr(build, "revision_from_git", counted)
    collectors = [build.BuildInfoCollector() for _ in range(3)]
    families = [f for c in collectors for _ in range(5) for f in c.collect()]
    assert len(asked) == 1
    assert {tuple(sorted(s.labels.items())) for f in families for s in f.samples} == {
        (("python", platform.python_version()), ("revision", "feedfacecafe"),
         ("version", importlib.metadata.version("poolscope")))}
    assert {(f.name, f.type, s.value) for f in families for s in f.samples} == {
        (build.NAME, "gauge", 1.0)}
