"""Weight and KV-cache formats of a served model: bytes stored, and what a GEMM costs in them.

Formats, named (the ``--weight-dtype`` and ``--kv-dtype`` a user picks):

- ``bf16``: weights, activations and the KV cache in bf16 (the baseline).
- ``fp8`` weights: W8A8, weights and activations in fp8 e4m3 with per-tensor scales, the GEMM
  at the fp8 tensor-core rate writing bf16 (Micikevicius et al. 2022, "FP8 Formats for Deep
  Learning"; vLLM's fp8 checkpoints). A device with no fp8 tensor cores (the A100) runs fp8
  weights weight-only (W8A16), as vLLM's FP8 Marlin kernel does on Ampere.
- ``int8`` / ``int4`` weights: weight-only W8A16 / W4A16 (GPTQ, Frantar et al. 2023; AWQ, Lin
  et al. 2024): weights dequantized inside the GEMM, the math in 16 bits, one fp16 scale per
  group of 128 weights (the AWQ and GPTQ default group size).
- ``fp4`` weights: NVFP4 (W4A4), weights and activations in FP4 e2m1 with one FP8 e4m3 scale
  per block of 16 values (NVIDIA, "Introducing NVFP4 for Efficient and Accurate Low-Precision
  Inference", 2025; TensorRT-LLM's and ModelOpt's FP4 checkpoints), the GEMM on Blackwell's FP4
  tensor cores at twice the FP8 rate (NVIDIA Blackwell datasheet: HGX B200 FP4 9 PF against FP8
  4.5 PF dense, GB200 10 against 5): ``FP4_ARCHS`` only; elsewhere a one-line error.
- ``fp8`` KV cache: keys and values stored in one byte each (vLLM ``kv_cache_dtype=fp8``).

Which weights: the linear projections of every block (attention, MLP, experts). The embedding,
the LM head, the MoE router and the norms stay in 16 bits (AutoAWQ and vLLM keep ``lm_head``
unquantized).

GEMM time: the compute term is the GEMM model's (``hwmodels.gemm``) for the math dtype; the
memory term is the GEMM model's bf16 term scaled by the bytes really moved (16-bit activations
in and out, weights in their format). Dequantization is taken as free: Marlin-style kernels
reach near-ideal bandwidth at small batch (Frantar et al. 2024, "MARLIN"). Those kernels, like
the mat-vec kernels of edge runtimes (llama.cpp, MLC), do not pad a skinny GEMM of at most
``SKINNY_ROWS`` rows to a 64-row tensor-core tile: for them the compute term is the FLOPs at
the achievable rate, when that is less than the tiled model's. A plain bf16 GEMM on a device
with a bf16 rate is exactly ``hwmodels.gemm``'s (cuBLAS).

A device with no 16-bit tensor rate in the catalogue computes at the first rate it does publish
among bf16, fp16, fp32: a conservative stand-in, named (the Jetson AGX Orin's tensor-core rate
is derived in the catalogue from its INT8 rate, so ``serve edge`` prices it on its tensor cores).
"""

from __future__ import annotations

from gpuplan.errors import GpuplanError, check_choice
from gpuplan.hwmodels.gemm import gemm_bytes, gemm_memory_s, gemm_time
from gpuplan.hwmodels.kernel_time import KernelTime
from gpuplan.workloads.dtypes import dtype_bytes
from gpuplan.workloads.ops import Gemm

WEIGHT_DTYPES = ("bf16", "fp8", "int8", "int4")  # every device (edge's "all")
FORMATS = (*WEIGHT_DTYPES, "fp4")  # fp4 on FP4_ARCHS only
FP4_KEYS = ("b200", "gb200")  # Blackwell, the catalogue's devices with FP4 tensor cores
FP4_RATE_OVER_FP8 = 2.0  # Blackwell datasheet (module docstring)
FP4_BLOCK = 16  # values per FP8 scale of NVFP4
FP4_BYTES = 0.5 + 1 / FP4_BLOCK  # stored bytes per value, scales included
KV_DTYPES = ("bf16", "fp8")
GROUP_SIZE = 128  # weights per quantization scale (AWQ, GPTQ default)
SCALE_BYTES = 2  # one fp16 scale per group
UNQUANTIZED_GEMMS = ("router", "lm_head")  # GEMM names that keep 16-bit weights
_MATH_FALLBACK = ("bf16", "fp16", "fp32")
SKINNY_ROWS = 16  # rows up to which weight-only and mat-vec kernels run untiled


def check_formats(weight_dtype: str, kv_dtype: str, acc=None) -> None:
    check_choice("weight_dtype", weight_dtype, FORMATS)
    if weight_dtype == "fp4" and acc is not None and acc.key not in FP4_KEYS:
        raise GpuplanError(f"weight_dtype='fp4' cannot run on {acc.key}: NVFP4 needs Blackwell's "
                           f"FP4 tensor cores ({', '.join(FP4_KEYS)})")  # fmt: skip
    check_choice("kv_dtype", kv_dtype, KV_DTYPES)


def weight_bytes_per_param(weight_dtype: str) -> float:
    """Stored bytes per quantized weight, group scales included."""
    check_choice("weight_dtype", weight_dtype, FORMATS)
    if weight_dtype == "fp4":
        return FP4_BYTES
    if weight_dtype in ("int8", "int4"):
        return dtype_bytes(weight_dtype) + SCALE_BYTES / GROUP_SIZE
    return dtype_bytes(weight_dtype)


def compute_dtype(acc, wanted: str) -> str:
    """``wanted`` if the device publishes a rate for it, else its first of bf16, fp16, fp32."""
    if acc.supports(wanted):
        return wanted
    return next((d for d in _MATH_FALLBACK if acc.supports(d)), wanted)


def math_dtype(acc, weight_dtype: str, act_dtype: str = "bf16") -> str:
    """The dtype a GEMM's tensor cores run in: fp8 for W8A8 where supported, else 16 bits."""
    if weight_dtype == "fp8" and acc.supports("fp8"):
        return "fp8"
    return compute_dtype(acc, act_dtype)


def _moved_bytes(m: int, n: int, k: int, act_bytes: float, weight_bytes: float) -> float:
    """A (activations, m x k) and C (m x n) in 16 bits; B (weights, k x n) in their format."""
    return (m * k + m * n) * act_bytes + k * n * weight_bytes


def quantized_gemm_time(acc, op: Gemm, eff, *, weight_dtype: str = "bf16") -> KernelTime:
    """Time of ``op`` (all its ``count`` repetitions) with its weights in ``weight_dtype``."""
    if op.name in UNQUANTIZED_GEMMS:
        weight_dtype = "bf16"
    if weight_dtype == "fp4":
        return _fp4_gemm_time(acc, op, eff)
    math = math_dtype(acc, weight_dtype, op.dtype)
    if math == op.dtype and weight_dtype == "bf16":
        return gemm_time(acc, op.m, op.n, op.k, op.dtype, eff).scaled(op.count)
    compute_s = gemm_time(acc, op.m, op.n, op.k, math, eff).compute_s
    if op.m <= SKINNY_ROWS:
        untiled_s = 2.0 * op.m * op.n * op.k / (acc.peak(math) * eff.gemm_fraction(math))
        compute_s = min(compute_s, untiled_s)
    if math == "fp8":  # W8A8: the GEMM model's own fp8 byte count
        memory_s = gemm_memory_s(acc, op.m, op.n, op.k, "fp8", eff)
    else:
        act = dtype_bytes(op.dtype)
        moved = _moved_bytes(op.m, op.n, op.k, act, weight_bytes_per_param(weight_dtype))
        if weight_dtype == "bf16":
            moved = gemm_bytes(op.m, op.n, op.k, op.dtype)
        memory_s = gemm_memory_s(acc, op.m, op.n, op.k, "bf16", eff) * (
            moved / gemm_bytes(op.m, op.n, op.k, "bf16")
        )
    return KernelTime(compute_s, memory_s, eff.kernel_overhead_s).scaled(op.count)


def _fp4_gemm_time(acc, op: Gemm, eff) -> KernelTime:
    """W4A4 NVFP4: the fp8 GEMM model's compute at ``FP4_RATE_OVER_FP8`` times the rate; the
    bytes of fp4 activations and weights with their scales in, a 16-bit output."""
    compute_s = gemm_time(acc, op.m, op.n, op.k, "fp8", eff).compute_s / FP4_RATE_OVER_FP8
    moved = (op.m * op.k + op.k * op.n) * FP4_BYTES + op.m * op.n * dtype_bytes(op.dtype)
    memory_s = gemm_memory_s(acc, op.m, op.n, op.k, "bf16", eff) * (
        moved / gemm_bytes(op.m, op.n, op.k, "bf16")
    )
    return KernelTime(compute_s, memory_s, eff.kernel_overhead_s).scaled(op.count)
