"""Another revision's checkout, importable beside this one for a side-by-side run.

A checkout imports itself as `poolscope.*`, which would resolve to the installed (this)
tree; a throwaway `poolscope` folder of links to the checkout's packages, first on
sys.path, makes those names mean the checkout's. Checkouts from before the namespace
import themselves as top-level packages, from their own folder.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

PACKAGES = ("contract", "service", "exporters", "bridge", "scheduler_bridge", "proxy_bridge")


def is_namespaced(checkout: Path) -> bool:
    return (checkout / "service").is_dir()


def import_root(checkout: Path) -> Path:
    """The folder to put first on sys.path so that the checkout's modules are imported."""
    if not is_namespaced(checkout):
        return checkout
    shim = Path(tempfile.mkdtemp(prefix="poolscope-checkout-"))
    (shim / "poolscope").mkdir()
    for package in PACKAGES:
        if (checkout / package).is_dir():
            (shim / "poolscope" / package).symlink_to(checkout.resolve() / package)
    return shim


def module_name(checkout: Path, module: str) -> str:
    """`module` (e.g. "scheduler_bridge") as the checkout names it."""
    return f"poolscope.{module}" if is_namespaced(checkout) else module
