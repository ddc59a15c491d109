"""Which build a process runs: one line for `--version`, one series for /metrics.

When one replica misbehaves, the first question is whether it runs the code the
others do. node_exporter and its kin answer it twice, on the command line and as a
`*_build_info` gauge a query can group by; every Poolscope service answers it the
same way. The answer is computed once per process: it cannot change while the
process runs, and asking git on every scrape would put a subprocess on the hot path.

The revision comes from what the build knew: a `REVISION` file beside this module
(the container build writes one, since an image holds no .git), else the git
checkout this module is in (a development or editable install), else "unknown".
An installed copy inside some other repository (a venv within a checkout) is not
that repository's revision, so git is asked only where its work tree is the one
holding this package.
"""

from __future__ import annotations

import functools
import importlib.metadata
import platform
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

NAME = "poolscope_build_info"
HELP = ("Always 1: the build this process runs, as labels (version of the poolscope "
        "package, source revision, Python version).")
LABELS = ("version", "revision", "python")
UNKNOWN = "unknown"

HERE = Path(__file__).resolve().parent
REVISION_FILE = HERE / "REVISION"
# A checkout answers in milliseconds; a hung filesystem must not hold up startup.
GIT_TIMEOUT_S = 2.0
# What a build may write into REVISION: a commit id, short or long, or a tag.
_REVISION = re.compile(r"[0-9A-Za-z][0-9A-Za-z._+-]{0,63}")


@dataclass(frozen=True)
class Build:
    version: str
    revision: str
    python: str


def _package_version() -> str:
    try:
        return importlib.metadata.version("poolscope")
    except importlib.metadata.PackageNotFoundError:  # run from a bare tree, not installed
        return UNKNOWN


def revision_from_file(path: Path) -> str | None:
    """The revision a build wrote, None when it wrote none; a file that holds
    anything but one revision is a broken build and says so."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: unreadable build revision: {e}") from e
    revision = text.strip()
    if not _REVISION.fullmatch(revision):
        raise ValueError(f"{path}: expected one revision (1-64 of [0-9A-Za-z._+-]), "
                         f"got {revision[:80]!r}")
    return revision


def revision_from_git(package_dir: Path, timeout_s: float = GIT_TIMEOUT_S) -> str | None:
    """HEAD's short id when `package_dir` sits at the top of a git work tree; None
    without git, outside a checkout, or inside one that is not this package's."""
    try:
        done = subprocess.run(
            ["git", "-C", str(package_dir), "rev-parse", "--show-toplevel", "--short=12",
             "HEAD"], capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = done.stdout.split()
    if done.returncode != 0 or len(lines) != 2:
        return None
    toplevel, revision = lines
    if Path(toplevel).resolve() != package_dir.parent:
        return None
    return revision


def revision(package_dir: Path = HERE) -> str:
    return (revision_from_file(package_dir / REVISION_FILE.name)
            or revision_from_git(package_dir) or UNKNOWN)


@functools.cache
def current() -> Build:
    """This process's build; the first call asks the file system (and maybe git)."""
    return Build(_package_version(), revision(), platform.python_version())


def version_text(prog: str) -> str:
    """The `--version` line: `PROG VERSION (revision R, python P)`."""
    b = current()
    return f"{prog} {b.version} (revision {b.revision}, python {b.python})"


class BuildInfoCollector(Collector):
    """`poolscope_build_info{version,revision,python} 1`. Building it reads the build
    once, so a broken REVISION file fails the service's start, not its first scrape."""

    def __init__(self) -> None:
        self._build = current()

    def collect(self) -> Iterator[Metric]:
        b = self._build
        family = GaugeMetricFamily(NAME, HELP, labels=LABELS)
        family.add_metric([b.version, b.revision, b.python], 1.0)
        yield family
