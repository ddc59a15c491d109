#!/bin/sh
# Installs Poolscope and its runtime dependencies into a virtual environment at
# PREFIX, each at the version constraints.txt pins (the versions CI tests).
# The image's Dockerfile runs this script; tests/deploy/test_image.py runs the
# same steps from a local wheelhouse.
#
#   install.sh PREFIX [REVISION]
#
# REVISION, a commit id or tag, is written beside poolscope/service/build.py,
# which reports it in --version and poolscope_build_info{revision}: an image has
# no .git to ask. Without one nothing is written. pip reads its own settings
# from the environment as usual (PIP_INDEX_URL, PIP_NO_INDEX, PIP_FIND_LINKS...).
set -eu

if [ $# -lt 1 ] || [ $# -gt 2 ] || [ -z "$1" ]; then
    echo "usage: install.sh PREFIX [REVISION]" >&2
    exit 2
fi
prefix=$1
revision=${2:-}
case $revision in
    *[!0-9A-Za-z._+-]*)
        echo "install.sh: REVISION may hold only [0-9A-Za-z._+-], got '$revision'" >&2
        exit 2 ;;
esac
src=$(cd "$(dirname "$0")/../.." && pwd)
constraints=$src/constraints.txt

"${PYTHON:-python3}" -m venv "$prefix"
py=$prefix/bin/python
# pip and setuptools first, at their pins: the project is then built with that
# setuptools (--no-build-isolation), not with whatever an isolated build fetches.
"$py" -m pip install -q -c "$constraints" pip setuptools
"$py" -m pip install -q -c "$constraints" --no-build-isolation "$src"
"$py" -m pip check

if [ -n "$revision" ]; then
    "$py" - "$revision" <<'PY'
import importlib.util
import sys
from pathlib import Path

[package_dir] = importlib.util.find_spec("poolscope.service").submodule_search_locations
(Path(package_dir) / "REVISION").write_text(sys.argv[1] + "\n", encoding="utf-8")

from poolscope.service import build  # reads it back as the services will

try:
    read = build.revision()
except ValueError as e:
    sys.exit(f"install.sh: {e}")
if read != sys.argv[1]:
    sys.exit(f"install.sh: wrote REVISION {sys.argv[1]!r}, poolscope reads {read!r}")
PY
fi
