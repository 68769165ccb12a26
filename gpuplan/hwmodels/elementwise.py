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

from gpuplan.hwmodels.efficiency import Efficiency, engine_norm_data
from gpuplan.hwmodels.kernel_time import ZERO, KernelTime
from gpuplan.workloads.dtypes import dtype_bytes
from gpuplan.workloads.ops import Elementwise, Memory

ROW_REDUCTIONS = ("rmsnorm", "layernorm", "softmax", "add_rmsnorm")


def row_per_elem_s(table: dict[str, float], op) -> float:
    """One row's reduction latency per element for ``op`` from ``eff.row_reduction_s_per_elem``
    (the engine's fused add + RMSNorm: its own measured kernel unless the table names it)."""
    family = kernel_family(op)
    if family == "add_rmsnorm":
        return table.get(family, engine_norm_data()["add_rmsnorm_s_per_elem"])
    return table.get(family, table.get(op.op, 0.0))


def elementwise_time(acc, op: Elementwise | Memory, eff: Efficiency) -> KernelTime:
    """Time of a bandwidth-bound kernel (``op.count`` of them)."""
    if op.bytes == 0:
        return ZERO  # e.g. the backward of an add: the gradient passes through, no kernel runs
    pass_ = getattr(op, "pass_", "fwd")
    memory_s = op.bytes / (acc.hbm_bytes_per_s * eff.elementwise_fraction(kernel_family(op), pass_))
    if isinstance(op, Elementwise) and op.op in ROW_REDUCTIONS and op.pass_ == "fwd":
        memory_s = max(memory_s, row_reduction_s(acc, op, eff))
    kernels = op.kernels if isinstance(op, Elementwise) else op.count
    return KernelTime(0.0, memory_s, eff.kernel_overhead_s * kernels)


# PyTorch's softmax (aten/src/ATen/native/cuda/SoftMax.cu, host_softmax) runs rows of at most
# 1024 elements (and 4096 bytes) on its persistent warp-per-row kernel (softmax_warp_forward)
# and longer rows on a block-per-row kernel (cunn_SoftMaxForward, or its shared-memory variant):
# two kernels with their own bandwidth and row latency.
WARP_SOFTMAX_MAX_ELEMS = 1024
WARP_SOFTMAX_MAX_BYTES = 4096


def kernel_family(op) -> str:
    """The efficiency entry of ``op``: its name, or ``softmax_warp`` for a short-row softmax."""
    name = op.op
    if name == "softmax" and isinstance(op, Elementwise):
        row_bytes = op.hidden * dtype_bytes(op.dtype)
        if op.hidden <= WARP_SOFTMAX_MAX_ELEMS and row_bytes <= WARP_SOFTMAX_MAX_BYTES:
            return "softmax_warp"
    return name


def row_reduction_s(acc, op: Elementwise, eff: Efficiency) -> float:
    """Latency floor of reducing ``op.tokens`` rows of ``op.hidden`` elements, a block per row."""
    if not acc.n_sms:  # unknown multiprocessor count (a blank datasheet cell): no floor
        return 0.0
    concurrent = acc.n_sms * eff.reduction_rows_per_sm
    waves = math.ceil(op.tokens / concurrent)
    per_elem_s = row_per_elem_s(eff.row_reduction_s_per_elem, op)
    return waves * op.hidden * per_elem_s * op.count
