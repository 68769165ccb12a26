"""Measurement records: read and check one JSON Lines file of the contract in ARCHITECTURE.md.

One record a line: ``{"kind", "device", "params": {...}, "measured": {...}, "source"}``. Each
kind has a fixed set of params (names, types, allowed values) and measured metrics, the table
of ``record_kinds`` (``PARAM_RULES``, ``MEASURED``); this module checks every line against it.

Assumptions, stated:
- Integers are JSON integers greater than zero and at most 2**53, the largest a float (the
  pricing's arithmetic) holds exactly (``4096.0`` and ``true`` are not integers);
  booleans are JSON booleans (``"true"`` is not one); measured values are finite numbers > 0.
- The optional params (``record_kinds``) are kept when present and checked.
- Other extra keys, at any level, are allowed and dropped: ``Record.params`` and
  ``Record.measured`` hold the contract's keys only.
- A bad line becomes a ``RecordError`` (line number and a reason naming the key, the value and
  what is valid); the other lines still read. Blank lines are skipped.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError, unknown_key
from gpuplan.validate.record_kinds import (
    BOOLEAN,
    KIND_OPTIONAL,
    KINDS,
    MAX_INT,
    MEASURED,
    MODEL_NAME,
    MULTIPLES,
    OBJECT,
    PARAM_RULES,
    POSITIVE_INT,
    ZERO_STAGE,
    Rule,
    model_names,
    optional_param_rules,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    """One checked measurement: the contract's params and metrics, SI units."""

    kind: str
    device: str
    params: dict[str, Any]
    measured: dict[str, float]
    source: str = ""
    line_no: int = 0  # 1-based line in its file; 0 when not read from a file


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordError:
    """A line that could not be used, and why."""

    line_no: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line_no}: {self.reason}"


def _type_name(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, int | float) else "null"
    )


def _check_value(field: str, value: Any, rule: Rule) -> str | None:
    """The reason ``value`` breaks ``rule``, or None when it is valid."""
    if rule == MODEL_NAME:
        names = model_names()
        if isinstance(value, str) and value in names:
            return None
        return f"{field}={value!r} is invalid: choose a model name among {', '.join(names)}"
    if rule == ZERO_STAGE:
        if isinstance(value, int) and not isinstance(value, bool) and value in (0, 1, 2, 3):
            return None
        return f"{field}={value!r} is invalid: choose one of 0, 1, 2, 3 (a JSON integer)"
    if rule == POSITIVE_INT:
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_INT:
            return None
        if isinstance(value, int) and value.bit_length() > 200:  # repr fails past 4,300 digits
            shown = f"an integer of {value.bit_length():,} bits"
        else:
            shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        return f"{field}={shown} is invalid: it must be a positive JSON integer, at most 2**53"
    if rule == OBJECT:
        if isinstance(value, dict):
            return None
        return f"{field} is {_type_name(value)}: it must be a JSON object (a config.json)"
    if rule == BOOLEAN:
        if isinstance(value, bool):
            return None
        return f"{field}={value!r} is invalid: it must be a JSON boolean (true or false)"
    if isinstance(value, str) and value in rule:
        return None
    return f"{field}={value!r} is invalid: choose one of {', '.join(rule)}"


def _check_optional(params: Mapping[str, Any]) -> list[str]:
    return [
        reason
        for name, rule in optional_param_rules().items()
        if name in params and (reason := _check_value(f"params.{name}", params[name], rule))
    ]


def _check_params(kind: str, params: Mapping[str, Any]) -> list[str]:
    rules = PARAM_RULES[kind]
    reasons = _check_optional(params)
    for name, rule in KIND_OPTIONAL.get(kind, {}).items():
        if name in params and (reason := _check_value(f"params.{name}", params[name], rule)):
            reasons.append(reason)
    for name, rule in rules.items():
        if name not in params:
            reasons.append(f"params.{name} is missing ({kind} needs {', '.join(rules)})")
        elif (reason := _check_value(f"params.{name}", params[name], rule)) is not None:
            reasons.append(reason)
    if reasons:
        return reasons
    for num, den in MULTIPLES.get(kind, ()):
        if params[num] % params[den]:
            reasons.append(
                f"params.{num}={params[num]} is invalid: it must be a multiple of "
                f"params.{den}={params[den]}"
            )
    return reasons


def _is_positive_number(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def _check_measured(kind: str, measured: Mapping[str, Any]) -> list[str]:
    required, optional = MEASURED[kind]
    reasons = []
    for name in required + optional:
        if name not in measured:
            if name in required:
                reasons.append(f"measured.{name} is missing ({kind} needs {', '.join(required)})")
        elif not _is_positive_number(measured[name]):
            reasons.append(
                f"measured.{name}={measured[name]!r} is invalid: it must be a positive finite number"
            )
    return reasons


def _check_object(field: str, value: Any) -> str | None:
    if isinstance(value, dict):
        return None
    return f"{field} must be a JSON object, got {_type_name(value)}"


def _check_top(obj: Mapping[str, Any], devices: Collection[str] | None) -> list[str]:
    """Reasons found in the top-level keys: kind, device, source, params, measured."""
    kind, device = obj.get("kind"), obj.get("device")
    reasons = []
    if "kind" not in obj:
        reasons.append(f"kind is missing: choose one of {', '.join(KINDS)}")
    elif kind not in KINDS:
        reasons.append(f"kind={kind!r} is invalid: choose one of {', '.join(KINDS)}")
    if "device" not in obj:
        reasons.append("device is missing: it names an accelerator of the catalogue, e.g. 'h200'")
    elif not isinstance(device, str):
        reasons.append(f"device={device!r} is invalid: it must be a string, e.g. 'h200'")
    elif devices is not None and device not in devices:
        reasons.append(str(unknown_key("device", device, devices)))
    if not isinstance(obj.get("source", ""), str):
        reasons.append(f"source={obj['source']!r} is invalid: it must be a string")
    for field in ("params", "measured"):
        if field not in obj:
            reasons.append(f"{field} is missing: it must be a JSON object")
        elif (reason := _check_object(field, obj[field])) is not None:
            reasons.append(reason)
    return reasons


def parse_record(obj: Any, *, line_no: int = 0, devices: Collection[str] | None = None) -> Record:
    """Check one decoded JSON value against the contract; every problem goes in one GpuplanError.

    ``devices`` is the collection of known device keys; None skips the device check.
    """
    if not isinstance(obj, dict):
        raise GpuplanError(f"a record must be a JSON object, got {_type_name(obj)}")
    reasons = _check_top(obj, devices)
    kind = obj.get("kind")
    known_kind = isinstance(kind, str) and kind in PARAM_RULES
    if known_kind and isinstance(obj.get("params"), dict):
        reasons += _check_params(kind, obj["params"])
    if known_kind and isinstance(obj.get("measured"), dict):
        reasons += _check_measured(kind, obj["measured"])
    if reasons:
        raise GpuplanError("; ".join(reasons))
    required, optional = MEASURED[kind]
    return Record(
        kind=kind,
        device=obj["device"],
        params={
            name: obj["params"][name]
            for name in (*PARAM_RULES[kind], *optional_param_rules(), *KIND_OPTIONAL.get(kind, {}))
            if name in obj["params"]
        },
        measured={m: obj["measured"][m] for m in required + optional if m in obj["measured"]},
        source=obj.get("source", ""),
        line_no=line_no,
    )


def _decode(raw: bytes | str) -> Any:
    """The JSON value of one line; a GpuplanError saying where it breaks otherwise."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as err:
        raise GpuplanError(f"not UTF-8 text: byte {err.start} is {raw[err.start]:#04x}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise GpuplanError(f"not valid JSON: {err.msg} (column {err.colno})") from None
    except (ValueError, RecursionError) as err:  # a 5,000-digit integer, nesting too deep
        raise GpuplanError(f"not valid JSON: {' '.join(str(err).split())[:120]}") from None


def parse_lines(
    lines: Iterable[bytes | str], *, devices: Collection[str] | None = None
) -> tuple[list[Record], list[RecordError]]:
    """Read JSON Lines (numbered from 1): the good records, and an error for each bad line."""
    records, errors = [], []
    for line_no, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            records.append(parse_record(_decode(raw), line_no=line_no, devices=devices))
        except GpuplanError as err:
            errors.append(RecordError(line_no=line_no, reason=str(err)))
    return records, errors


def read_records(
    path: str | Path, *, known_devices: Callable[[], Iterable[str]] | None = None
) -> tuple[list[Record], list[RecordError]]:
    """Read a JSON Lines file of records: the good ones, and an error for each bad line.

    ``known_devices()`` returns the catalogue's device keys (None skips the device check).
    A file that is missing, unreadable or holds no line at all is a GpuplanError.
    """
    path = Path(path)
    if not path.is_file():
        what = "is a directory, not a file" if path.is_dir() else "does not exist"
        raise GpuplanError(f"records file {str(path)!r} {what}")
    try:
        lines = path.read_bytes().splitlines()
    except OSError as err:
        raise GpuplanError(f"records file {str(path)!r} cannot be read: {err.strerror}") from None
    if not any(line.strip() for line in lines):
        raise GpuplanError(f"records file {str(path)!r} is empty: it holds no record")
    devices = frozenset(known_devices()) if known_devices is not None else None
    records, errors = parse_lines(lines, devices=devices)
    if not records and errors and all("not UTF-8 text" in e.reason for e in errors):
        raise GpuplanError(f"records file {str(path)!r} is not UTF-8 text on any line: a binary "
                           "file, not JSON Lines?")  # fmt: skip
    return records, errors
