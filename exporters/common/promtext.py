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
_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\\n]|\\.)*)"')
_ESCAPE = re.compile(r"\\(.)")
_UNESCAPED = {"n": "\n"}

# A sample's label set, sorted by name, so equal sets compare and hash equal.
Labels = tuple[tuple[str, str], ...]


class PromTextError(ValueError):
    """A wanted line broke the exposition grammar."""


@lru_cache(maxsize=16)
def _finder(names: frozenset[str]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    # The lookahead stops `foo` from matching `foo_bucket`.
    return re.compile(rf"^(?:{alternatives})(?=[{{ \t]).*$", re.MULTILINE)


def _labels(block: str | None) -> Labels:
    if not block:
        return ()
    return tuple(sorted((k, _ESCAPE.sub(lambda m: _UNESCAPED.get(m.group(1), m.group(1)), v))
                        for k, v in _PAIR.findall(block)))


def select(text: str, names: Iterable[str]) -> dict[str, list[tuple[Labels, float]]]:
    """The wanted metrics' samples, (label set, value) in page order.

    Names not on the page are simply not in the result. NaN and infinities are
    returned as floats: whether they are acceptable is the caller's policy. The
    same label set twice under one name is an error: the exposition format forbids
    it, and summing both would double the measurement.
    """
    found: dict[str, list[tuple[Labels, float]]] = {}
    seen: set[tuple[str, Labels]] = set()
    for match in _finder(frozenset(names)).finditer(text):
        line = match.group(0)
        parsed = _LINE.fullmatch(line)
        if parsed is None or (parsed.group(2) is not None
                              and _LABELS.fullmatch(parsed.group(2)) is None):
            raise PromTextError(f"malformed sample line: {line[:200]!r}")
        name, labels = parsed.group(1), _labels(parsed.group(2))
        if (name, labels) in seen:
            raise PromTextError(f"duplicate series: {line[:200]!r}")
        seen.add((name, labels))
        found.setdefault(name, []).append((labels, float(parsed.group(3))))
    return found


def prefixes_on_page(text: str, prefixes: tuple[str, ...]) -> set[str]:
    """Which of `prefixes` start at least one line of `text` (a substring search
    in C: a multiline regex anchored at every line start costs ten times more)."""
    return {p for p in prefixes if text.startswith(p) or "\n" + p in text}
