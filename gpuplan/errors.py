"""Errors a user can meet, and how they are worded.

Every error names the field, the value it got and what would be valid. The command-line face
turns ``GpuplanError`` into a one-line message and exit code 2, never a traceback.
"""

from __future__ import annotations

import difflib
import functools
import inspect
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
    word = key.lower() if isinstance(key, str) else ""
    near = difflib.get_close_matches(word, known, n=3, cutoff=0.4)
    hint = f"; did you mean {', '.join(near)}?" if near else ""
    return GpuplanError(f"unknown {kind} {shown(key)}{hint} (known: {', '.join(known)})")


def shown(value: object) -> str:
    """``value`` as a one-line message shows it: a gpuplan object by its class and key or name
    (its repr is pages long), anything else by its repr cut to 60 characters."""
    if type(value).__module__.startswith("gpuplan."):
        tag = getattr(value, "key", None) or getattr(value, "name", None)
        name = type(value).__name__
        return f"{name}({tag!r})" if isinstance(tag, str) else f"a {name}"
    text = " ".join(repr(value).split())
    return text if len(text) <= 60 else text[:57] + "..."


def check_positive(
    field: str, value: float, *, allow_zero: bool = False, allow_inf: bool = False
) -> None:
    """Raise a GpuplanError naming ``field`` unless ``value`` is a positive number (or zero if
    allowed): a real number, not a bool, not NaN, and finite unless ``allow_inf``."""
    check_number(field, value, allow_inf=allow_inf)
    bad = value < 0 if allow_zero else value <= 0
    if bad:
        want = "zero or more" if allow_zero else "greater than zero"
        raise GpuplanError(f"{field}={shown(value)} is invalid: it must be {want}")


def check_key(kind: str, key: object) -> None:
    """Raise a GpuplanError unless ``key`` (a catalogue key or a path) is a non-empty string."""
    if not isinstance(key, str) or not key.strip():
        example = ", e.g. 'h200'" if kind in ("accelerator", "device") else ""
        raise GpuplanError(f"{kind} key {shown(key)} is invalid: give a non-empty string{example}")


def check_number(field: str, value: float, *, allow_inf: bool = False) -> None:
    """Raise a GpuplanError naming ``field`` unless ``value`` is a real number (bool is not
    one), not NaN, and finite unless ``allow_inf``."""
    if isinstance(value, bool) or not isinstance(value, int | float) and not _is_real(value):
        raise GpuplanError(f"{field}={shown(value)} is invalid: it must be a number")
    if math.isnan(value) or (math.isinf(value) and not allow_inf):
        raise GpuplanError(f"{field}={shown(value)} is invalid: it must be a finite number")


def check_whole(field: str, value: int, *, low: int = 1, high: int | None = None) -> None:
    """Raise a GpuplanError naming ``field`` unless ``value`` is a whole number (an int, not a
    bool, not a float) from ``low`` to ``high``."""
    if isinstance(value, bool) or not isinstance(value, int) and not _is_integer(value):
        raise GpuplanError(f"{field}={shown(value)} is invalid: it must be a whole number")
    if value < low or (high is not None and value > high):
        top = f" to {high:,}" if high is not None else " or more"
        raise GpuplanError(f"{field}={shown(value)} is invalid: it must be from {low:,}{top}")


def _is_real(value) -> bool:
    """numpy's floating and integer scalars count as numbers; strings and None do not."""
    return _numpy_kind(value) in ("i", "u", "f")


def _is_integer(value) -> bool:
    return _numpy_kind(value) in ("i", "u")


def _numpy_kind(value) -> str:
    """The dtype kind of a numpy scalar ("i", "u", "f", ...); "" for anything else."""
    dtype = getattr(value, "dtype", None) if type(value).__module__ == "numpy" else None
    return getattr(dtype, "kind", "") if getattr(value, "ndim", 1) == 0 else ""


def check_switch(field: str, value: object) -> None:
    """Raise a GpuplanError naming ``field`` unless ``value`` is True or False (numpy's bool and
    the whole numbers 0 and 1 count: they mean the same to every ``if``)."""
    if not (isinstance(value, int) and value in (0, 1) or type(value).__name__ == "bool_"):
        raise GpuplanError(f"{field}={shown(value)} is invalid: give True or False")


def check_choice(field: str, value: str, choices: Iterable[str]) -> None:
    """Raise a GpuplanError naming ``field`` unless ``value`` is one of ``choices``."""
    choices = list(choices)
    if value not in choices:
        raise GpuplanError(f"{field}={shown(value)} is invalid: choose one of {', '.join(choices)}")


Kind = type | str | None


def check_kind(field: str, value: object, kind: Kind | tuple[Kind, ...]) -> None:
    """Raise a GpuplanError naming ``field`` unless ``value`` is of ``kind``: a class, a class
    name (``"ModelConfig"``: any class of that name in the value's ancestry, so no import is
    needed), None (None allowed), or a tuple of them. ``str`` reads as "a key string"."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if value is None and None in kinds:
        return
    ancestry = {c.__name__ for c in type(value).__mro__}
    for k in kinds:
        matches = isinstance(k, str) and k in ancestry or isinstance(k, type) and isinstance(value, k)
        if matches and not (isinstance(value, bool) and k in (int, float)):  # True: no number
            return
    words = {str: "a key string", int: "a whole number", float: "a number", bool: "True or False"}
    names = [words.get(k) or f"a {getattr(k, '__name__', k)}" for k in kinds if k is not None]
    raise GpuplanError(f"{field}={shown(value)} is invalid: give {' or '.join(names)}")


def expects(**kinds: Kind | tuple[Kind, ...]):
    """Decorator for a public function: when a call fails with a built-in error (an
    AttributeError from a float where a ModelConfig belongs, ...), name the argument of the
    wrong kind instead (``kinds`` as ``check_kind`` reads them, by parameter name). A correct
    call pays nothing: the kinds are checked only after a failure, so a duck-typed object that
    works keeps working."""

    def wrap(fn):
        names = list(inspect.signature(fn).parameters)
        where = {name: names.index(name) for name in kinds}

        @functools.wraps(fn)
        def checked(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except GpuplanError:
                raise
            except (AttributeError, TypeError, KeyError, IndexError, ValueError):
                for name, kind in kinds.items():
                    if name in kwargs or where[name] < len(args):
                        value = kwargs[name] if name in kwargs else args[where[name]]
                        check_kind(name, value, kind)
                raise

        return checked

    return wrap
