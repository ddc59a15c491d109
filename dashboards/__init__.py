"""Grafana dashboards and a Prometheus console page over Poolscope's series.

The Grafana JSON files are generated from `dashboards.poolscope` by
`python -m dashboards` and committed, so they import as-is and a test catches
a hand edit that drifts from the generator. The console page
(`consoles/poolscope.html`) ships its own helper library, because Debian's
Prometheus package ships no console libraries.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
CONSOLES = HERE / "consoles"
CONSOLE_LIBRARIES = HERE / "console_libraries"
CONSOLE_PATH = "/consoles/poolscope.html"


def console_flags() -> list[str]:
    """The Prometheus flags that serve the fleet console at CONSOLE_PATH."""
    return [f"--web.console.templates={CONSOLES}",
            f"--web.console.libraries={CONSOLE_LIBRARIES}"]
