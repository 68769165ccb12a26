"""Bandwidth-bound kernels: elementwise ops, normalizations, casts, gathers and optimizer steps.

Their FLOPs are negligible; time is the bytes (``workloads.ops``) over an achievable fraction of
HBM bandwidth that depends on the op (a reduction per row, as in a norm or a softmax, reaches
less than a plain streaming add), plus the fixed per-kernel overhead. Roofline after Williams,
Waterman and Patterson (CACM 2009), with per-op efficiencies as in LLMCompass (Zhang et al. 2024).
"""

from __future__ import annotations

from gpuplan.hwmodels.efficiency import Efficiency
from gpuplan.hwmodels.kernel_time import ZERO, KernelTime
from gpuplan.workloads.ops import Elementwise, Memory


def elementwise_time(acc, op: Elementwise | Memory, eff: Efficiency) -> KernelTime:
    """Time of a bandwidth-bound kernel (``op.count`` of them)."""
    if op.bytes == 0:
        return ZERO  # e.g. the backward of an add: the gradient passes through, no kernel runs
    memory_s = op.bytes / (acc.hbm_bytes_per_s * eff.elementwise_fraction(op.op))
    kernels = op.kernels if isinstance(op, Elementwise) else op.count
    return KernelTime(0.0, memory_s, eff.kernel_overhead_s * kernels)
