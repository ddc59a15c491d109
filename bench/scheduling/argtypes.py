"""Flag values of the scheduling benchmarks (the loop and its model) and the churn soak:
comma-separated lists, each refused with a usage error naming what was expected (single
numbers: poolscope.service.argtypes)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence


def floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas: {e}") from e


def positive_ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected integers separated by commas: {e}") from e
    if not all(v >= 1 for v in values):
        raise argparse.ArgumentTypeError("expected integers >= 1")
    return values


def outage(text: str) -> tuple[float, float]:
    values = floats(text)
    if len(values) != 2 or not (values[0] >= 0 and values[1] > 0):
        raise argparse.ArgumentTypeError("expected START,LENGTH: seconds >= 0 and > 0")
    return values[0], values[1]


def names(allowed: Sequence[str]) -> Callable[[str], tuple[str, ...]]:
    def parse(text: str) -> tuple[str, ...]:
        names = tuple(text.split(","))
        unknown = [n for n in names if n not in allowed]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {unknown}; choose from {list(allowed)}")
        return names
    return parse
