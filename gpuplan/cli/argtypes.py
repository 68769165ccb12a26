"""Argument types for the command line: numbers checked where they are parsed.

argparse prefixes each message with the flag (``argument --tp: ...``), so the messages here
name the value and what would be valid.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable


def _number(kind: type, text: str):
    try:
        return kind(text)
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None


def positive(kind: type) -> Callable[[str], int | float]:
    """A number greater than zero (``kind`` is int or float)."""

    def parse(text: str):
        value = _number(kind, text)
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text!r} is invalid: it must be greater than zero")
        return value

    return parse


def non_negative(kind: type) -> Callable[[str], int | float]:
    """A number zero or greater."""

    def parse(text: str):
        value = _number(kind, text)
        if not value >= 0:
            raise argparse.ArgumentTypeError(f"{text!r} is invalid: it must be zero or more")
        return value

    return parse


def open_fraction(text: str) -> float:
    """A fraction strictly between 0 and 1."""
    value = _number(float, text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: it must lie between 0 and 1")
    return value


positive_int = positive(int)
positive_float = positive(float)
