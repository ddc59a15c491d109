"""Pick a few metrics out of a large Prometheus text page, strictly and fast.

An engine's /metrics is mostly histograms we do not want (vLLM's runs to
thousands of lines). A full parse of every line costs more CPU than the rest
of the exporter together, so substring searches find, in C, just the lines
that start with a wanted name; only those few are parsed in Python (one
multiline regex of all the names cost two to five times more). The parse of
those lines is strict: a wanted line that does not follow the exposition
grammar is an error, never a silently skipped value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?Inf|NaN"
_LINE = re.compile(
    r"([a-zA-Z_:][a-zA-Z0-9_:]*)"       # metric name
    r"(?:\{(.*)\})?"                    # label block (values may contain '}')
    rf"[ \t]+({_NUMBER})"               # value
    r"(?:[ \t]+-?\d+)?[ \t]*\r?")       # optional timestamp
_PAIR_TEXT = r'[ \t]*[a-zA-Z_][a-zA-Z0-9_]*[ \t]*=[ \t]*"(?:[^"\\\n]|\\.)*"[ \t]*'
# Pairs separated by commas (one trailing comma allowed). The comma is required:
# with it optional, a long block of pairs ending in junk backtracks exponentially.
_LABELS = re.compile(rf"(?:{_PAIR_TEXT}(?:,{_PAIR_TEXT})*,?)?[ \t]*")
_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\\n]|\\.)*)"')
_ESCAPE = re.compile(r"\\(.)")
_UNESCAPED = {"n": "\n"}

# A sample's label set, sorted by name, so equal sets compare and hash equal.
Labels = tuple[tuple[str, str], ...]


class PromTextError(ValueError):
    """A wanted line broke the exposition grammar."""


# What may follow a wanted name at the start of a line for the line to be its
# sample: anything else (`foo_bucket` after `foo`) is another metric.
_AFTER_NAME = frozenset("{ \t\r\n")


def _sample_lines(page: str, name: str) -> Iterator[str]:
    """Lines of `page` (which starts with a newline) that are samples of `name`."""
    needle = "\n" + name
    after = len(name) + 1
    at = page.find(needle)
    while at != -1:
        end = page.find("\n", at + 1)
        end = len(page) if end == -1 else end
        if page[at + after:at + after + 1] in _AFTER_NAME or at + after == len(page):
            yield page[at + 1:end]
        at = page.find(needle, end)


def _unescape(value: str) -> str:
    if "\\" not in value:
        return value
    return _ESCAPE.sub(lambda m: _UNESCAPED.get(m.group(1), m.group(1)), value)


def _labels(block: str | None) -> Labels:
    if not block:
        return ()
    pairs = tuple(sorted((k, _unescape(v)) for k, v in _PAIR.findall(block)))
    if len({k for k, _ in pairs}) < len(pairs):
        raise PromTextError(f"a label name twice in {{{block[:200]}}}")
    return pairs


def select(text: str, names: Iterable[str]) -> dict[str, list[tuple[Labels, float]]]:
    """The wanted metrics' samples, (label set, value) in page order.

    Names not on the page are simply not in the result. NaN and infinities are
    returned as floats: whether they are acceptable is the caller's policy. The
    same label set twice under one name is an error: the exposition format forbids
    it, and summing both would double the measurement.
    """
    found: dict[str, list[tuple[Labels, float]]] = {}
    seen: set[tuple[str, Labels]] = set()
    page = "\n" + text
    for line in (line for name in names for line in _sample_lines(page, name)):
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
