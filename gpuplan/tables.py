"""Plain-text tables and JSON documents for people and machines (the commands, validation and
the reports all print through them).

People read tables: a value is formatted by the unit its column name carries (STYLE.md: units in
names) — ``_s`` as ns/µs/ms/s, ``_bytes`` as B/KB/MB/GB/TB (decimal, SI), ``_bytes_per_s`` as
GB/s or TB/s, ``_flops_per_s`` as TFLOP/s, ``_hz`` as MHz/GHz, ``_w`` as W, ``pct`` as %,
``params`` as K/M/B/T counts. Machines read ``--json``: raw SI numbers, NaN written as null.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpuplan.units import GB, GHZ, KB, MB, MS, TB, TFLOPS, US

Formatter = Callable[[Any], str]
MISSING = "-"


def _numpy(*names: str) -> tuple[type, ...]:
    """numpy's scalar types ``names``, if numpy is loaded: a value cannot be a numpy scalar
    before it is, so the tables never import it themselves (a command that does not need
    numpy starts faster)."""
    np = sys.modules.get("numpy")
    return tuple(getattr(np, n) for n in names) if np is not None else ()


def is_missing(value: Any) -> bool:
    """None, NaN and pandas' NA all read as 'no value'."""
    if value is None or type(value).__name__ in ("NAType", "NaTType"):
        return True
    return isinstance(value, (float, *_numpy("floating"))) and math.isnan(value)


def _sig(value: float) -> str:
    """Three significant digits without scientific notation: 4.8, 131, 989, 1979."""
    return f"{value:.0f}" if abs(value) >= 999.5 else f"{value:.3g}"


def _scaled(value: float, steps: Sequence[tuple[float, str]]) -> str:
    """``value`` in the largest unit of ``steps`` (scale, name; ascending) it reaches."""
    scale, name = steps[0]
    for step_scale, step_name in steps:
        if abs(value) >= step_scale:
            scale, name = step_scale, step_name
    return f"{_sig(value / scale)} {name}"


def format_seconds(value: float) -> str:
    """1.2e-5 -> '12 µs'; 0.0105 -> '10.5 ms'; 2.0 -> '2 s'."""
    if value == 0:
        return "0 s"
    return _scaled(value, ((1e-9, "ns"), (US, "µs"), (MS, "ms"), (1.0, "s")))


def format_bytes(value: float) -> str:
    """131072 -> '131 KB'; 141e9 -> '141 GB' (decimal units)."""
    return _scaled(value, ((1.0, "B"), (KB, "KB"), (MB, "MB"), (GB, "GB"), (TB, "TB")))


def format_bytes_per_s(value: float) -> str:
    """4.8e12 -> '4.8 TB/s'; 450e9 -> '450 GB/s'."""
    return _scaled(value, ((MB, "MB/s"), (GB, "GB/s"), (TB, "TB/s")))


def format_flops_per_s(value: float) -> str:
    """9.894e14 -> '989 TFLOP/s' (always TFLOP/s, so a column compares at a glance)."""
    return f"{_sig(value / TFLOPS)} TFLOP/s"


def format_hz(value: float) -> str:
    return _scaled(value, ((1e6, "MHz"), (GHZ, "GHz")))


def format_watts(value: float) -> str:
    return f"{_sig(value)} W"


def format_pct(value: float) -> str:
    return f"{value:.1f}%"


def format_count(value: float) -> str:
    """8_030_261_248 -> '8.03 B' (parameters)."""
    if abs(value) < 1e3:
        return f"{value:g}"
    return _scaled(value, ((1e3, "K"), (1e6, "M"), (1e9, "B"), (1e12, "T")))


# Suffix of a column name -> how to show it; the first suffix that matches wins.
SUFFIX_FORMATS: tuple[tuple[str, Formatter], ...] = (
    ("_flops_per_s", format_flops_per_s),
    ("_bytes_per_s", format_bytes_per_s),
    ("_per_s", lambda v: f"{_sig(v)}/s"),
    ("_bytes_per_token", format_bytes),
    ("bytes", format_bytes),
    ("_s", format_seconds),
    ("_hz", format_hz),
    ("_w", format_watts),
    ("_pct", format_pct),
    ("pct_error", format_pct),
    ("params", format_count),
)


def format_value(name: str, value: Any) -> str:
    """``value`` as a person reads it, chosen by the unit in the name ``name``."""
    if is_missing(value):
        return MISSING
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, *_numpy("bool_"))):
        return "yes" if value else "no"
    if isinstance(value, (int, float, *_numpy("number"))):
        for suffix, fmt in SUFFIX_FORMATS:
            if name.endswith(suffix):
                return fmt(value)
        return f"{value:g}" if isinstance(value, (float, *_numpy("floating"))) else str(value)
    return str(value)


def format_banded(name: str, value: Any, band: Any, fmt=None) -> str:
    """``577 ms (540–610)``: the value and its error band (``[low, high]``) in the value's unit,
    the unit written once where all three share it; the value alone without a band."""
    fmt = fmt or (lambda v: format_value(name, v))
    text = fmt(value)
    if not band or is_missing(value):
        return text
    low, high = fmt(band[0]), fmt(band[1])
    unit = text.rpartition(" ")[2] if " " in text else ""
    if unit and low.endswith(" " + unit) and high.endswith(" " + unit):
        low, high = low[: -len(unit) - 1], high[: -len(unit) - 1]
    return f"{text} ({low}–{high})"


def band_text(doc: Any) -> str:
    """What a document's bands stand on, in words (``error_band_words``), else its label; ''
    where it has neither (``validate.bands.documents``)."""
    return doc.get("error_band_words") or doc.get("error_band_label") or ""


def _records(rows: Any) -> list[dict[str, Any]]:
    """A DataFrame (any object with ``to_dict('records')``) or a sequence of mappings."""
    if hasattr(rows, "to_dict"):
        return rows.to_dict("records")
    return [dict(row) for row in rows]


def _is_numeric(value: Any) -> bool:
    return isinstance(value, (int, float, *_numpy("number"))) and not isinstance(
        value, (bool, *_numpy("bool_"))
    )


def render_table(
    rows: Any,
    columns: Sequence[str] | None = None,
    *,
    headers: Mapping[str, str] | None = None,
    formats: Mapping[str, Formatter] | None = None,
) -> str:
    """An aligned plain-text table: a header, a rule, one line per row; numbers to the right.

    ``columns`` picks and orders the columns (all of the first row's by default); ``headers``
    renames them; ``formats`` overrides the formatter of a column (else ``format_value``).
    """
    records = _records(rows)
    columns = list(columns) if columns is not None else list(records[0]) if records else []
    headers, formats = headers or {}, formats or {}
    cells = [
        [
            formats[c](r.get(c))
            if c in formats and not is_missing(r.get(c))
            else format_value(c, r.get(c))
            for c in columns
        ]
        for r in records
    ]
    right = [any(_is_numeric(r.get(c)) for r in records) for c in columns]
    titles = [headers.get(c, c) for c in columns]
    widths = [max([len(t)] + [len(row[i]) for row in cells]) for i, t in enumerate(titles)]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right, strict=True)
        ]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(titles), rule] + [line(row) for row in cells])


def to_jsonable(value: Any) -> Any:
    """Plain Python for json: numpy scalars unwrapped, NaN/NA -> None, frames -> row lists."""
    if hasattr(value, "to_dict") and hasattr(value, "columns"):
        return [to_jsonable(r) for r in value.to_dict("records")]
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if is_missing(value):
        return None
    if isinstance(value, _numpy("generic")):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def dump_json(doc: Any) -> str:
    """One JSON document, indented, with raw SI numbers and no NaN."""
    return json.dumps(to_jsonable(doc), indent=2, allow_nan=False)
