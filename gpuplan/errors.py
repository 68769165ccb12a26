"""Errors a user can meet, and how they are worded.

Every error names the field, the value it got and what would be valid. The command-line face
turns ``GpuplanError`` into a one-line message and exit code 2, never a traceback.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable


class GpuplanError(ValueError):
    """Bad input: the message says which field, which value and what would be valid."""


class Infeasible(GpuplanError):
    """A plan that cannot run (it does not fit in memory, or a degree the model or machine cannot
    take): the message says what does not fit and the nearest change that does. The command
    line prints it in one line and exits 1 (``--allow-infeasible`` prices it as a what-if)."""

    def __init__(self, message: str, *, fix: dict | None = None) -> None:
        super().__init__(message)
        self.fix = fix or {}  # the nearest change that fits, as flags: {"--tp": "4", ...}


def unknown_key(kind: str, key: str, known: Iterable[str]) -> GpuplanError:
    """An unknown catalogue key, with the nearest known keys (difflib) and then the full list."""
    known = sorted(known)
    near = difflib.get_close_matches(key.lower(), known, n=3, cutoff=0.4)
    hint = f"; did you mean {', '.join(near)}?" if near else ""
    return GpuplanError(f"unknown {kind} {key!r}{hint} (known: {', '.join(known)})")


def check_positive(
    field: str, value: float, *, allow_zero: bool = False, allow_inf: bool = False
) -> None:
    """Raise a GpuplanError naming ``field`` unless ``value`` is a positive number (or zero if
    allowed): a real number, not a bool, not NaN, and finite unless ``allow_inf``."""
    check_number(field, value, allow_inf=allow_inf)
    bad = value < 0 if allow_zero else value <= 0
    if bad:
        want = "zero or more" if allow_zero else "greater than zero"
        raise GpuplanError(f"{field}={value!r} is invalid: it must be {want}")


def check_key(kind: str, key: object) -> None:
    """Raise a GpuplanError unless ``key`` (a catalogue key or a path) is a non-empty string."""
    if not isinstance(key, str) or not key.strip():
        example = ", e.g. 'h200'" if kind in ("accelerator", "device") else ""
        raise GpuplanError(f"{kind} key {key!r} is invalid: give a non-empty string{example}")


def check_number(field: str, value: float, *, allow_inf: bool = False) -> None:
    """Raise a GpuplanError naming ``field`` unless ``value`` is a real number (bool is not
    one), not NaN, and finite unless ``allow_inf``."""
    if isinstance(value, bool) or not isinstance(value, int | float) and not _is_real(value):
        raise GpuplanError(f"{field}={value!r} is invalid: it must be a number")
    if math.isnan(value) or (math.isinf(value) and not allow_inf):
        raise GpuplanError(f"{field}={value!r} is invalid: it must be a finite number")


def check_whole(field: str, value: int, *, low: int = 1, high: int | None = None) -> None:
    """Raise a GpuplanError naming ``field`` unless ``value`` is a whole number (an int, not a
    bool, not a float) from ``low`` to ``high``."""
    if isinstance(value, bool) or not isinstance(value, int) and not _is_integer(value):
        raise GpuplanError(f"{field}={value!r} is invalid: it must be a whole number")
    if value < low or (high is not None and value > high):
        top = f" to {high:,}" if high is not None else " or more"
        raise GpuplanError(f"{field}={value!r} is invalid: it must be from {low:,}{top}")


def _is_real(value) -> bool:
    """numpy's floating and integer scalars count as numbers; strings and None do not."""
    return _numpy_kind(value) in ("i", "u", "f")


def _is_integer(value) -> bool:
    return _numpy_kind(value) in ("i", "u")


def _numpy_kind(value) -> str:
    """The dtype kind of a numpy scalar ("i", "u", "f", ...); "" for anything else."""
    dtype = getattr(value, "dtype", None) if type(value).__module__ == "numpy" else None
    return getattr(dtype, "kind", "") if getattr(value, "ndim", 1) == 0 else ""


def check_choice(field: str, value: str, choices: Iterable[str]) -> None:
    """Raise a GpuplanError naming ``field`` unless ``value`` is one of ``choices``."""
    choices = list(choices)
    if value not in choices:
        raise GpuplanError(f"{field}={value!r} is invalid: choose one of {', '.join(choices)}")
