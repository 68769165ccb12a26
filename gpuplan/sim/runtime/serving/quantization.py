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
- ``nvfp4`` weights (``fp4`` is the same name): W4A4, weights and activations in FP4 e2m1 with
  one FP8 e4m3 scale per block of 16 values (``hwmodels.formats``; NVIDIA, "Introducing NVFP4 for
  Efficient and Accurate Low-Precision Inference", 2025; TensorRT-LLM's and ModelOpt's NVFP4
  checkpoints), the GEMM at the device's catalogue ``fp4`` rate (Blackwell: B200 9 PF against FP8
  4.5 PF dense; B300 13.1 PF). A device without NVFP4 tensor cores runs the weights weight-only
  (W4A16: dequantized to 16 bits inside the GEMM, as vLLM's FP4 Marlin kernel does before
  Blackwell, ``marlin_utils_fp4``), except under TensorRT-LLM, whose NVFP4 kernels are
  Blackwell-only: a one-line error there (``check_formats``).
- ``mxfp4`` weights: FP4 e2m1 with one E8M0 scale per block of 32 (OCP MX v1.0), weight-only
  (W4A16) on every device: vLLM's MXFP4 MoE backends (``quantization/mxfp4.py``,
  ``get_mxfp4_backend``) run bf16 activations by default: FlashInfer's ``SM100_FI_MXFP4_BF16`` on
  Blackwell (MXFP8 activations only behind ``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8``), Triton or
  Marlin on Hopper, CK on gfx950. ``gpuplan estimate gemm --dtype mxfp4`` prices the W4A4
  block-scaled tensor-core GEMM itself.
- ``fp8`` KV cache: keys and values stored in one byte each (vLLM ``kv_cache_dtype=fp8``).

Which weights: the linear projections of every block (attention, MLP, experts). A model whose
routed experts ship in their own format (``ModelConfig.expert_weight_dtype``: gpt-oss's MXFP4
experts, its config.json ``quantization_config`` leaving attention, router, embedding and head
unconverted) keeps that format for the experts' weights and GEMMs (``op_weight_dtype``), the
rest in the served weight dtype. The embedding,
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
from gpuplan.hwmodels.formats import block_format, has_format
from gpuplan.hwmodels.gemm import gemm_bytes, gemm_memory_s, gemm_time
from gpuplan.hwmodels.kernel_time import KernelTime
from gpuplan.workloads.dtypes import dtype_bytes
from gpuplan.workloads.ops import Gemm
from gpuplan.workloads.params import count_params, ffn_params

WEIGHT_DTYPES = ("bf16", "fp8", "int8", "int4")  # every device (edge's "all")
BLOCK_WEIGHTS = ("fp4", "nvfp4", "mxfp4")  # block-scaled weights (hwmodels.formats)
FORMATS = (*WEIGHT_DTYPES, *BLOCK_WEIGHTS)
W4A4 = ("fp4", "nvfp4")  # the block formats served with 4-bit activations where the device can
KV_DTYPES = ("bf16", "fp8")
GROUP_SIZE = 128  # weights per quantization scale (AWQ, GPTQ default)
SCALE_BYTES = 2  # one fp16 scale per group
# GEMM names that keep 16-bit weights: the router, the LM head, and Qwen2-MoE's one-column
# shared-expert gate (a plain torch.nn.Linear(d, 1) in transformers' Qwen2MoeSparseMoeBlock: one
# output column is narrower than any packed weight-only kernel's tile, as for the router); and
# MLA's absorbed W_UK and W_UV bmm's, which vLLM runs on 16-bit copies ("we currently do not have
# quantized bmm's", vllm/v1/attention/backends/mla/common.py ``process_weights_after_loading``)
UNQUANTIZED_GEMMS = ("router", "lm_head", "shared_expert_gate", "mla_w_uk", "mla_w_uv")
_MATH_FALLBACK = ("bf16", "fp16", "fp32")
SKINNY_ROWS = 16  # rows up to which weight-only and mat-vec kernels run untiled


def check_formats(weight_dtype: str, kv_dtype: str, acc=None, *, stack: str = "") -> None:
    """The formats are known; NVFP4 under TensorRT-LLM needs Blackwell (its FP4 kernels have no
    weight-only fallback: TensorRT-LLM docs, "Numerical Precision": NVFP4 on Blackwell)."""
    check_choice("weight_dtype", weight_dtype, FORMATS)
    if (weight_dtype in W4A4 and acc is not None and stack == "trt-llm"
            and not has_format(acc, "nvfp4")):
        raise GpuplanError(f"weight_dtype={weight_dtype!r} cannot run on {acc.key} under "
                           "trt-llm: its NVFP4 kernels need Blackwell's FP4 tensor cores; "
                           "--stack vllm runs them weight-only")  # fmt: skip
    check_choice("kv_dtype", kv_dtype, KV_DTYPES)


def weight_path(acc, weight_dtype: str) -> str:
    """How a GEMM with ``weight_dtype`` weights runs on ``acc``, in words (for printouts)."""
    if weight_dtype in W4A4 and has_format(acc, "nvfp4"):
        return f"{weight_dtype} weights: W4A4 on {acc.key}'s FP4 tensor cores"
    if weight_dtype in BLOCK_WEIGHTS:
        why = ("vLLM's MXFP4 backends keep bf16 activations" if weight_dtype == "mxfp4"
               else f"{acc.key} has no NVFP4 tensor cores")  # fmt: skip
        return (f"{weight_dtype} weights: weight-only on {acc.key} (dequantized to "
                f"{compute_dtype(acc, 'bf16')} inside the GEMM: {why})")
    return ""


def op_weight_dtype(model, op_name: str, weight_dtype: str) -> str:
    """The format of the weights of GEMM ``op_name``: a routed expert's in the model's own
    expert format where it has one (``expert_``-named GEMMs, ``workloads.feed_forward``)."""
    if op_name.startswith("expert_"):
        return expert_weight_dtype(model, weight_dtype)
    return weight_dtype


def routed_expert_params(cfg) -> int:
    """Parameters of all the model's routed experts, every MoE block's."""
    return cfg.n_moe_layers * cfg.n_experts * ffn_params(cfg, cfg.d_ff_expert)


def served_weight_dtype(cfg, weight_dtype: str | None = None) -> str:
    """The weight format a replica serves: ``weight_dtype`` where given, else the checkpoint's
    own (``ModelConfig.checkpoint_weight_dtype``): vLLM, SGLang and TensorRT-LLM load a
    quantized checkpoint in its format (vLLM reads ``quantization_config``:
    ``vllm/model_executor/layers/quantization/__init__.py``; DeepSeek-V3's model card serves its
    FP8 weights as shipped), else bf16."""
    return weight_dtype or getattr(cfg, "checkpoint_weight_dtype", "") or "bf16"


def expert_weight_dtype(cfg, weight_dtype: str) -> str:
    """The routed experts' weight format: the model's own where it has one (gpt-oss: mxfp4),
    else the deployment's ``weight_dtype``."""
    return getattr(cfg, "expert_weight_dtype", "") or weight_dtype


def block_weights_bytes(cfg, block_params: float, weight_dtype: str) -> float:
    """Bytes of ``block_params`` decoder-block parameters (all of the model's blocks, or a
    pipeline stage's share of them) in ``weight_dtype``, the routed experts' share in the
    model's expert format where it has one."""
    expert = getattr(cfg, "expert_weight_dtype", "")
    if not expert or not cfg.n_experts:
        return block_params * weight_bytes_per_param(weight_dtype)
    share = routed_expert_params(cfg) / sum(count_params(cfg).per_layer)
    return block_params * ((1 - share) * weight_bytes_per_param(weight_dtype)
                           + share * weight_bytes_per_param(expert))  # fmt: skip


def weight_bytes_per_param(weight_dtype: str) -> float:
    """Stored bytes per quantized weight, group or block scales included (a block format's one
    per-tensor scale is left out: 4 bytes a matrix)."""
    check_choice("weight_dtype", weight_dtype, FORMATS)
    if weight_dtype in BLOCK_WEIGHTS:
        return block_format(weight_dtype).bytes_per_value
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
    if weight_dtype in W4A4 and has_format(acc, "nvfp4"):
        return block_gemm_time(acc, op, eff, "nvfp4")
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


def block_gemm_time(acc, op: Gemm, eff, fmt_name: str) -> KernelTime:
    """Both operands in a block-scaled format (W4A4 NVFP4 or MXFP4, or MXFP8): the GEMM model's
    own price of it (``hwmodels.gemm.block_scaled_gemm_time``: the device's rate for the format,
    its bytes with the block scales). The caller checks the device has the format."""
    return gemm_time(acc, op.m, op.n, op.k, block_format(fmt_name).name, eff).scaled(op.count)
