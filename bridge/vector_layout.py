"""Reading an instant vector whose series are the ones of the previous answer.

Asked the same query again, Prometheus answers with the same series in the same order:
only the evaluation time and the value strings differ. Turning the label sets into
dicts was most of the cost of reading an answer (34,000 of them at 1,000 pools, with
their strings, plus freeing them again), so a `Layout` keeps the last answer cut around
its values, with its parsed label sets. The next answer is put back together from the
kept pieces and its own time and values, and compared with what was received byte for
byte: only an answer that is exactly "the same series, other values" reuses the label
sets. Anything else (a series more or less, a changed label, a warning) is parsed in
full by the caller, and cut into the next layout.

Why the cut is sound: `,"value":[` holds a `"` that follows a `,`, which cannot happen
inside a JSON string (every `"` in one is escaped), nor across a string's end (`value`
cannot follow a closing quote). So every match of `_MARK` starts a series' value pair,
and a value string read after it, holding no quote or backslash, is exactly the text a
JSON parser would have read.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Mapping, Sequence

import orjson

# A series' value pair: the mark `,"value":[<time>,"`, then the value string.
_MARK = re.compile(rb',"value":\[[^,"\\]*,"')
_STRING = rb'([^"\\]*)"'
# Value strings that are no JSON number, or that JSON would read differently from
# float() ("-0" is an integer zero to JSON): those answers take float() per value.
_NOT_JSON = (b"N", b"I", b"-0")

Labels = Sequence[Mapping[str, str]]


class Layout:
    """An answer's bytes around its value pairs, and the label sets it parsed to."""

    __slots__ = ("_parts", "labels")

    def __init__(self, parts: list[bytes], labels: Labels) -> None:
        # The text before the first mark, then per series its mark, its value string
        # and the text up to the next mark; marks and values are refilled on each read.
        self._parts = parts
        # A tuple: every answer read through this layout shares it, so nothing may change it.
        self.labels = tuple(labels)

    @classmethod
    def cut(cls, body: bytes, labels: Labels) -> Layout | None:
        """The layout of `body`, whose full parse gave `labels`, one per value pair.

        None when the answer cannot be cut this way: no series, value pairs that do not
        match the series parsed, or series not all evaluated at the same time.
        """
        mark = _mark(body)
        values = _strings(mark, body)
        if mark is None or len(values) != len(labels):
            return None
        pieces = body.split(mark)
        if len(pieces) != len(values) + 1:
            return None
        parts: list[bytes] = [b""] * (3 * len(values) + 1)
        parts[0] = pieces[0]
        # Each later piece is a value string, then the text up to the next mark.
        parts[3::3] = [p[len(v):] for p, v in zip(pieces[1:], values, strict=True)]
        layout = cls(parts, labels)
        return layout if layout.values_of(body) is not None else None

    def values_of(self, body: bytes) -> array[float] | None:
        """The values of `body` if it is this layout with other values, else None.

        None too for a value string float() refuses: the full parse reports it.
        """
        mark = _mark(body)
        strings = _strings(mark, body)
        parts = self._parts
        if mark is None or 3 * len(strings) + 1 != len(parts):
            return None
        parts[1::3] = [mark] * len(strings)
        parts[2::3] = strings
        if b"".join(parts) != body:
            return None
        try:
            return _floats(strings)
        except ValueError:
            return None


def _mark(body: bytes) -> bytes | None:
    """The first series' `,"value":[<time>,"`; the layout checks every other one."""
    first = _MARK.search(body)
    return None if first is None else first.group()


def _strings(mark: bytes | None, body: bytes) -> list[bytes]:
    """The value strings after every `mark` (the time included).

    A pattern with the whole mark as its literal prefix is found by a fast search
    rather than matched character by character: 6 ms rather than 8-14 ms at 34,000
    series. It is compiled per answer (the time changes), ~0.1 ms.
    """
    if mark is None:
        return []
    return re.compile(re.escape(mark) + _STRING).findall(body)


def _floats(strings: list[bytes]) -> array[float]:
    """float() of every value string, read as one JSON array when all are JSON numbers.

    float() on 34,000 strings took 7 ms; orjson reads them as numbers in one call, and
    a number to a double is cheap. Both round correctly, so the values are identical.
    """
    text = b",".join(strings)
    if not any(token in text for token in _NOT_JSON):
        try:
            return array("d", orjson.loads(b"[" + text + b"]"))
        except orjson.JSONDecodeError:
            pass  # not all numbers JSON reads (e.g. "1_0"): float() decides
    return array("d", map(float, strings))
