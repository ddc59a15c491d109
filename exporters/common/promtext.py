"""Pick a few metrics out of a large Prometheus text page, strictly and fast.

An engine's /metrics is mostly histograms we do not want (vLLM's runs to
thousands of lines). A full parse of every line costs more CPU than the rest
of the exporter together, so one compiled regex finds, in C, just the lines
whose metric name is wanted; only those few are parsed in Python. The parse of
those lines is strict: a wanted line that does not follow the exposition
grammar is an error, never a silently skipped value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?Inf|NaN"
_LINE = re.compile(
    r"([a-zA-Z_:][a-zA-Z0-9_:]*)"       # metric name
    r"(?:\{(.*)\})?"                    # label block (values may contain '}')
    rf"[ \t]+({_NUMBER})"               # value
    r"(?:[ \t]+-?\d+)?[ \t]*\r?")       # optional timestamp
_LABELS = re.compile(r'(?:[ \t]*[a-zA-Z_][a-zA-Z0-9_]*[ \t]*=[ \t]*"(?:[^"\\\n]|\\.)*"[ \t]*,?)*'
                     r"[ \t]*")


class PromTextError(ValueError):
    """A wanted line broke the exposition grammar."""


@lru_cache(maxsize=16)
def _finder(names: frozenset[str]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    # The lookahead stops `foo` from matching `foo_bucket`.
    return re.compile(rf"^(?:{alternatives})(?=[{{ \t]).*$", re.MULTILINE)


def select(text: str, names: Iterable[str]) -> dict[str, list[float]]:
    """Values of the wanted metrics, one entry per label set, in page order.

    Names not on the page are simply not in the result. NaN and infinities are
    returned as floats: whether they are acceptable is the caller's policy.
    """
    found: dict[str, list[float]] = {}
    for match in _finder(frozenset(names)).finditer(text):
        line = match.group(0)
        parsed = _LINE.fullmatch(line)
        if parsed is None or (parsed.group(2) is not None
                              and _LABELS.fullmatch(parsed.group(2)) is None):
            raise PromTextError(f"malformed sample line: {line[:200]!r}")
        found.setdefault(parsed.group(1), []).append(float(parsed.group(3)))
    return found


@lru_cache(maxsize=16)
def _prefix_finder(prefixes: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("^(" + "|".join(re.escape(p) for p in prefixes) + ")", re.MULTILINE)


def first_prefix(text: str, prefixes: tuple[str, ...]) -> str | None:
    """Which of `prefixes` the first sample line starting with one of them uses."""
    match = _prefix_finder(prefixes).search(text)
    return match.group(1) if match else None
