"""Score predictions against measurement records: the error of each, and its spread per kind.

For each record and each metric that was both measured and predicted, the absolute percentage
error is ``100 * |predicted - measured| / measured`` (ARCHITECTURE.md, "Measurement records").
The summary per (kind, metric) gives the count, the median and the 90th percentile of that
error (``numpy.percentile``, linear interpolation between closest ranks).

A prediction that raises ``GpuplanError`` (bad input for the model) or ``NotImplementedError``
(a case the model does not cover yet) becomes an error for that record's line, not a crash; any
other exception is a bug and propagates.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from gpuplan.errors import GpuplanError
from gpuplan.validate.record_kinds import KINDS, MEASURED, PARAM_RULES
from gpuplan.validate.records import Record, RecordError

Predictor = Callable[[Record], Mapping[str, float]]

ROW_COLUMNS = ("line", "kind", "device", "metric", "measured", "predicted", "abs_pct_error")
SUMMARY_COLUMNS = ("kind", "metric", "n", "median_abs_pct_error", "p90_abs_pct_error")


@dataclass(frozen=True, slots=True, kw_only=True)
class ScoreResult:
    """Rows (one per record and metric, params as extra columns), summary per kind and metric."""

    rows: pd.DataFrame
    summary: pd.DataFrame
    errors: list[RecordError]

    def to_json(self) -> dict[str, list[dict[str, Any]]]:
        """The machine form: rows (params nested), summary, errors; plain Python values."""
        return {
            "rows": [_row_json(row) for row in self.rows.to_dict("records")],
            "summary": [
                {c: _plain(row[c]) for c in SUMMARY_COLUMNS}
                for row in self.summary.to_dict("records")
            ],
            "errors": [{"line": e.line_no, "reason": e.reason} for e in self.errors],
        }


def _plain(value: Any) -> Any:
    """A numpy or pandas scalar as the Python value json writes."""
    return value.item() if isinstance(value, np.generic) else value


def _row_json(row: Mapping[str, Any]) -> dict[str, Any]:
    head = ("kind", "metric", "measured", "predicted", "abs_pct_error", "device", "line")
    out = {c: _plain(row[c]) for c in head}
    out["params"] = {name: _plain(row[name]) for name in PARAM_RULES[row["kind"]]}
    return out


def abs_pct_error(*, measured: float, predicted: float) -> float:
    """100 * |predicted - measured| / measured; measured must be greater than zero."""
    if not measured > 0:
        raise GpuplanError(f"measured={measured!r} is invalid: it must be greater than zero")
    return 100.0 * abs(predicted - measured) / measured


def _check_predicted(metric: str, value: Any) -> float:
    ok = isinstance(value, int | float | np.number) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value < 0:
        raise GpuplanError(f"predicted {metric}={value!r} is not a finite number >= 0")
    return float(value)


def _rows_for(record: Record, predicted: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per metric measured and predicted; raises GpuplanError for a bad prediction."""
    rows = []
    for metric, measured in record.measured.items():
        if metric not in predicted:
            continue
        value = _check_predicted(metric, predicted[metric])
        error = abs_pct_error(measured=measured, predicted=value)
        base = (record.line_no, record.kind, record.device, metric, measured, value, error)
        rows.append(dict(zip(ROW_COLUMNS, base, strict=True)) | record.params)
    return rows


def _param_dtype(values: list[Any]) -> str:
    """Nullable integer or boolean dtype, so a kind lacking the param does not turn 4096 into
    4096.0; object otherwise (strings)."""
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, bool) for v in present):
        return "boolean"
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return "Int64"
    return "object"


def _rows_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Rows as a DataFrame: the fixed columns, then one column per param name met."""
    columns = _columns(rows)
    frame = pd.DataFrame(rows, columns=columns)
    dtypes = {c: _param_dtype([row.get(c) for row in rows]) for c in columns[len(ROW_COLUMNS) :]}
    dtypes |= {"measured": "float64", "predicted": "float64", "abs_pct_error": "float64"}
    return frame.astype(dtypes)


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    params = dict.fromkeys(name for row in rows for name in row if name not in ROW_COLUMNS)
    return list(ROW_COLUMNS) + list(params)


def summarize(rows: pd.DataFrame) -> pd.DataFrame:
    """n, median and p90 of abs_pct_error per (kind, metric), in the contract's order."""
    out = []
    for kind in KINDS:
        required, optional = MEASURED[kind]
        for metric in required + optional:
            errors = rows.loc[(rows["kind"] == kind) & (rows["metric"] == metric), "abs_pct_error"]
            if len(errors):
                err = errors.to_numpy(dtype=float)
                median, p90 = np.percentile(err, [50, 90], method="linear")
                out.append((kind, metric, len(err), float(median), float(p90)))
    return pd.DataFrame(out, columns=list(SUMMARY_COLUMNS))


def score_records(
    records: Iterable[Record], predict: Predictor, *, errors: Iterable[RecordError] = ()
) -> ScoreResult:
    """Predict every record and score it; ``errors`` (e.g. from reading) are carried along."""
    rows, found = [], list(errors)
    for record in records:
        try:
            rows += _rows_for(record, predict(record))
        except (GpuplanError, NotImplementedError) as err:
            what = "not modelled" if isinstance(err, NotImplementedError) else "cannot predict"
            found.append(RecordError(line_no=record.line_no, reason=f"{what}: {err}"))
    frame = _rows_frame(rows)
    found.sort(key=lambda e: e.line_no)
    return ScoreResult(rows=frame, summary=summarize(frame), errors=found)
