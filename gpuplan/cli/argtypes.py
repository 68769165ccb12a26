"""Argument types for the command line: every value checked where it is parsed, one type per
kind of input.

argparse prefixes each message with the flag (``argument --tp: ...``), so the messages here
name the value and what would be valid. Numbers are finite (``inf`` and ``nan`` are refused
unless a type says otherwise) and bounded (``gpuplan.limits``); whole numbers are decimal
literals (``true`` or ``2.5`` is not one); words, keys and paths are not empty.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from gpuplan import limits

_DEFAULT_MAX = {int: limits.MAX_DIM, float: limits.MAX_FLOAT}


def _number(kind: type, text: str):
    what = "a whole number" if kind is int else "a number"
    if not text.strip():
        raise argparse.ArgumentTypeError(f"an empty value is not {what}")
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
    if kind is float and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: it must be a finite number")
    return value


def _bounded(kind: type, low: str, test: Callable, maximum) -> Callable[[str], int | float]:
    maximum = _DEFAULT_MAX[kind] if maximum is None else maximum

    def parse(text: str):
        value = _number(kind, text)
        if not test(value) or value > maximum:
            raise argparse.ArgumentTypeError(
                f"{text!r} is invalid: it must be {low} and at most {maximum:,}"
            )
        return value

    return parse


def positive(kind: type, maximum: float | None = None) -> Callable[[str], int | float]:
    """A number greater than zero (``kind`` is int or float), at most ``maximum``."""
    return _bounded(kind, "greater than zero", lambda v: v > 0, maximum)


def non_negative(kind: type, maximum: float | None = None) -> Callable[[str], int | float]:
    """A number zero or greater, at most ``maximum``."""
    return _bounded(kind, "zero or more", lambda v: v >= 0, maximum)


def at_least_one(text: str) -> float:
    """A finite ratio of at least 1 (a busiest-to-mean load)."""
    return _bounded(float, "at least 1", lambda v: v >= 1, None)(text)


def open_fraction(text: str) -> float:
    """A fraction strictly between 0 and 1."""
    value = _number(float, text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: it must lie between 0 and 1")
    return value


def fraction(text: str) -> float:
    """A fraction above 0 and at most 1."""
    value = _number(float, text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: it must be above 0 and at most 1")
    return value


def percentile(text: str) -> float:
    """A percentile above 0 and at most 100."""
    value = _number(float, text)
    if not 0 < value <= 100:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: it must be above 0 and at most 100")
    return value


def random_seed(text: str) -> int:
    """A random seed: a whole number from 0 to 2^64 - 1 (negative seeds are refused)."""
    value = _number(int, text)
    if not 0 <= value <= limits.MAX_SEED:
        raise argparse.ArgumentTypeError(
            f"{text!r} is invalid: a seed is a whole number from 0 to {limits.MAX_SEED:,}"
        )
    return value


def byte_count(text: str) -> int:
    """A whole number of bytes, written as an integer or in float notation (``1e6``)."""
    value = _number(float, text)
    if not (value.is_integer() and 0 < value <= limits.MAX_BYTES):
        raise argparse.ArgumentTypeError(
            f"{text!r} is invalid: it must be a whole number of bytes from 1 to "
            f"{limits.MAX_BYTES:,}"
        )
    return int(value)


def int_list(maximum: int = limits.MAX_DIM) -> Callable[[str], tuple[int, ...]]:
    """Comma-separated whole numbers, each from 1 to ``maximum`` (``1,2,4,8``)."""
    one = positive(int, maximum)

    def parse(text: str) -> tuple[int, ...]:
        try:
            return tuple(one(x) for x in text.split(","))
        except argparse.ArgumentTypeError as err:
            raise argparse.ArgumentTypeError(f"{text!r}: {err}") from None

    return parse


def word(text: str) -> str:
    """A key, name or path: any text that is not empty or blank."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty value is invalid: give a name or a path")
    return text


positive_int = positive(int)
positive_float = positive(float)
gpu_count = positive(int, limits.MAX_GPUS)
layer_count = positive(int, limits.MAX_LAYERS)
request_count = positive(int, limits.MAX_REQUESTS)
repeat_count = positive(int, limits.MAX_REPEAT)
