"""Price any operator description on an accelerator: the one entry point of the hardware layer."""

from __future__ import annotations

from gpuplan.errors import GpuplanError, expects, shown
from gpuplan.hwmodels.attention import attention_time
from gpuplan.hwmodels.collectives import collective_time, custom_all_reduce_time
from gpuplan.hwmodels.efficiency import Efficiency
from gpuplan.hwmodels.elementwise import elementwise_time
from gpuplan.hwmodels.gemm import gemm_time, grouped_gemm_time, is_grouped
from gpuplan.hwmodels.kernel_time import KernelTime
from gpuplan.workloads.ops import Attention, Collective, Elementwise, Gemm, Memory, Op, Scan


@expects(acc="Accelerator", eff="Efficiency")  # an op of no kind: the GpuplanError below
def price(op: Op, acc, eff: Efficiency) -> KernelTime:
    """Time of ``op`` (all ``op.count`` repetitions) on accelerator ``acc``."""
    if isinstance(op, Gemm) and is_grouped(op):
        return grouped_gemm_time(acc, op.count, op.m, op.n, op.k, op.dtype, eff)
    if isinstance(op, Gemm):
        return gemm_time(acc, op.m, op.n, op.k, op.dtype, eff).scaled(op.count)
    if isinstance(op, Attention):
        return attention_time(acc, op, eff)
    if isinstance(op, Elementwise | Memory):
        return elementwise_time(acc, op, eff)
    if isinstance(op, Collective) and op.kernel != "nccl":
        return custom_all_reduce_time(acc, op.world, op.bytes_per_rank, eff,
                                      op.kernel).scaled(op.count)
    if isinstance(op, Collective):
        link = scaleout_link(acc) if op.link == "scaleout" else None
        return collective_time(acc, op.op, op.world, op.bytes_per_rank, eff,
                               link_bytes_per_s_override=link).scaled(op.count)
    if isinstance(op, Scan):
        return scan_time(acc, op, eff)
    raise GpuplanError(f"op={shown(op)} is invalid: give an operator (Gemm, Attention, "
                       "Elementwise, Memory, Collective, Scan), e.g. from layer_forward")


def scaleout_link(acc) -> float:
    """The GPU's own NIC, one direction (a collective between nodes)."""
    if not acc.scaleout_bytes_per_s:
        raise GpuplanError(f"{acc.key} has no scale-out bandwidth in the catalogue: a collective "
                           "between nodes cannot be priced on it")
    return acc.scaleout_bytes_per_s


def kernel_count(op: Op) -> int:
    """Kernels the op launches (an add's backward launches none)."""
    if isinstance(op, Elementwise):
        return op.kernels
    if getattr(op, "launches", None) is not None:
        return op.launches
    return 0 if op.bytes == 0 and op.flops == 0 else op.count


def host_calls(op: Op) -> int:
    """Torch calls the CPU dispatches to run ``op`` (its kernels, plus views where known)."""
    return getattr(op, "host_calls", kernel_count(op))


def scan_time(acc, op: Scan, eff: Efficiency) -> KernelTime:
    """A chunked linear-recurrence kernel (``workloads.ops.Scan``) on the roofline: its chunk
    products are tensor-core tiles like flash attention's, so its FLOPs run at the fitted share
    of the 16-bit peak that attention reaches (``attn_fwd_fraction``, ``attn_bwd_fraction``),
    its bytes at the attention kernels' share of HBM bandwidth (``hbm_fraction``); no constant
    of its own is fitted (none measured yet)."""
    dtype = op.dtype if acc.supports(op.dtype) else "bf16"
    fraction = eff.attn_bwd_fraction if op.pass_ == "bwd" else eff.attn_fwd_fraction
    compute_s = op.flops / (acc.peak(dtype) * fraction)
    memory_s = op.bytes / (acc.hbm_bytes_per_s * eff.hbm_fraction)
    return KernelTime(compute_s, memory_s, eff.kernel_overhead_s * op.count)
