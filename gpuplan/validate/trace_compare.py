"""Where prediction and measurement part: a profiler trace's kernel time by operator class,
beside the predicted breakdown of the same case, per iteration.

The trace (``validate.trace``) classifies each GPU kernel by its name; the prediction
(``validate.record_prediction``) attributes time to operators. Both are mapped onto the trace's classes
(gemm, attention_fwd, attention_bwd, norm, softmax, elementwise, copy_cast, reduce, optimizer,
nccl, other); launch gaps and host time, which a kernel table cannot see, stay in their own row.
A trace usually holds several iterations: their number is given, or inferred from the GEMM
count (GEMMs are never fused away, so measured GEMMs over predicted GEMMs per iteration).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from gpuplan.errors import GpuplanError
from gpuplan.sim.estimate.breakdown import Breakdown, Item

HOST = "launch/host (not in a kernel table)"


def predicted_class(item: Item) -> str:
    """The trace class a predicted item's kernels would be classified as."""
    name = item.op.lower()
    if item.category == "gemm":
        return "gemm"
    if item.category == "attention":
        return "attention_bwd" if item.phase == "bwd" else "attention_fwd"
    if item.category == "communication":
        return "nccl"
    if item.category == "launch":
        return HOST
    if item.category == "adamw":
        return "optimizer"
    if item.category == "cross_entropy":
        return "reduce"
    if "norm" in name:
        return "norm"
    if "softmax" in name:
        return "softmax"
    if any(word in name for word in ("layout", "copy", "cast", "append", "permute")):
        return "copy_cast"
    return "elementwise"


def compare(
    measured_table: pd.DataFrame, breakdown: Breakdown, *, iterations: int | None = None
) -> tuple[pd.DataFrame, int]:
    """Per class: measured and predicted time per iteration, kernel counts, difference.
    ``measured_table`` is ``validate.trace.kernel_table`` of the trace."""
    has_column = "class" in measured_table.columns
    measured = measured_table.set_index("class") if has_column else measured_table
    items = breakdown.frame().assign(**{"class": [predicted_class(i) for i in breakdown.items]})
    predicted = items.groupby("class")[["time_s", "kernels"]].sum()
    if iterations is None:
        iterations = _infer_iterations(measured, predicted)
    elif isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise GpuplanError(f"iterations={iterations!r} is invalid: a whole number, 1 or more")
    classes = list(dict.fromkeys([*measured.index, *predicted.index]))
    rows = []
    for cls in classes:
        m_s = measured["total_s"].get(cls, 0.0) / iterations
        p_s = predicted["time_s"].get(cls, 0.0)
        rows.append(
            {
                "class": cls,
                "measured_s": m_s,
                "predicted_s": p_s,
                "measured_kernels": measured["count"].get(cls, 0) / iterations,
                "predicted_kernels": int(predicted["kernels"].get(cls, 0)),
                "difference_s": p_s - m_s,
            }
        )
    table = pd.DataFrame(rows).sort_values("measured_s", ascending=False, ignore_index=True)
    return table, iterations


def _infer_iterations(measured: pd.DataFrame, predicted: pd.DataFrame) -> int:
    m = measured["count"].get("gemm", 0)
    p = predicted["kernels"].get("gemm", 0)
    if not m or not p:
        raise GpuplanError("cannot infer the trace's iterations from its GEMMs: give --iterations")
    return max(1, round(m / p))


def compare_case(
    measured_table: pd.DataFrame,
    kind: str,
    device: str,
    params: Mapping[str, Any],
    *,
    iterations: int | None = None,
) -> tuple[pd.DataFrame, int]:
    from gpuplan.validate.record_prediction import predict_breakdown

    bd = predict_breakdown(kind, device, params)
    return compare(measured_table, bd, iterations=iterations)
