"""Bandwidth-bound kernels: elementwise ops, normalizations, casts, gathers and optimizer steps.

Their FLOPs are negligible; time is the bytes (``workloads.ops``) over an achievable fraction of
HBM bandwidth that depends on the op (a reduction per row, as in a norm or a softmax, reaches
less than a plain streaming add), plus the fixed per-kernel overhead. A row reduction is done by
one thread block per row, so when there are few rows the time is set by the latency of reducing
one row (proportional to its length), in waves of ``n_sms x reduction_rows_per_sm`` rows. Roofline after Williams,
Waterman and Patterson (CACM 2009), with per-op efficiencies as in LLMCompass (Zhang et al. 2024).
"""

from __future__ import annotations

import math

from gpuplan.hwmodels.efficiency import Efficiency
from gpuplan.hwmodels.kernel_time import ZERO, KernelTime
from gpuplan.workloads.ops import Elementwise, Memory

ROW_REDUCTIONS = ("rmsnorm", "layernorm", "softmax")


def elementwise_time(acc, op: Elementwise | Memory, eff: Efficiency) -> KernelTime:
    """Time of a bandwidth-bound kernel (``op.count`` of them)."""
    if op.bytes == 0:
        return ZERO  # e.g. the backward of an add: the gradient passes through, no kernel runs
    pass_ = getattr(op, "pass_", "fwd")
    memory_s = op.bytes / (acc.hbm_bytes_per_s * eff.elementwise_fraction(op.op, pass_))
    if isinstance(op, Elementwise) and op.op in ROW_REDUCTIONS and op.pass_ == "fwd":
        memory_s = max(memory_s, row_reduction_s(acc, op, eff))
    kernels = op.kernels if isinstance(op, Elementwise) else op.count
    return KernelTime(0.0, memory_s, eff.kernel_overhead_s * kernels)


def row_reduction_s(acc, op: Elementwise, eff: Efficiency) -> float:
    """Latency floor of reducing ``op.tokens`` rows of ``op.hidden`` elements, a block per row."""
    if not acc.n_sms:  # unknown multiprocessor count (a blank datasheet cell): no floor
        return 0.0
    concurrent = acc.n_sms * eff.reduction_rows_per_sm
    waves = math.ceil(op.tokens / concurrent)
    per_elem_s = eff.row_reduction_s_per_elem.get(op.op, 0.0)
    return waves * op.hidden * per_elem_s * op.count
