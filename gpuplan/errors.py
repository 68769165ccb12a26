"""Errors a user can meet, and how they are worded.

Every error names the field, the value it got and what would be valid. The command-line face
turns ``GpuplanError`` into a one-line message and exit code 2, never a traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class GpuplanError(ValueError):
    """Bad input: the message says which field, which value and what would be valid."""


def unknown_key(kind: str, key: str, known: Iterable[str]) -> GpuplanError:
    """An unknown catalogue key, with the nearest known keys (difflib) and then the full list."""
    known = sorted(known)
    near = difflib.get_close_matches(key.lower(), known, n=3, cutoff=0.4)
    hint = f"; did you mean {', '.join(near)}?" if near else ""
    return GpuplanError(f"unknown {kind} {key!r}{hint} (known: {', '.join(known)})")


def check_positive(field: str, value: float, *, allow_zero: bool = False) -> None:
    """Raise a GpuplanError naming ``field`` unless ``value`` is positive (or zero if allowed)."""
    bad = value < 0 if allow_zero else value <= 0
    if bad:
        want = "zero or more" if allow_zero else "greater than zero"
        raise GpuplanError(f"{field}={value!r} is invalid: it must be {want}")


def check_choice(field: str, value: str, choices: Iterable[str]) -> None:
    """Raise a GpuplanError naming ``field`` unless ``value`` is one of ``choices``."""
    choices = list(choices)
    if value not in choices:
        raise GpuplanError(f"{field}={value!r} is invalid: choose one of {', '.join(choices)}")
