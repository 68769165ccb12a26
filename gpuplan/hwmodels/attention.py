"""Fused (flash) attention time: forward, backward and decode against a KV cache.

- Forward/backward: FLOPs (``workloads.ops.Attention``) at an achievable fraction of the dense
  16-bit peak, quantized in waves: the kernel launches one block per (batch, query head,
  ``attn_tile_q`` query rows), as FlashAttention-2 does (Dao 2023, sec. 3.2), and blocks run
  ``n_sms`` at a time.
- Decode (``seq_q`` shorter than one query tile): the kernel streams the KV cache once, so the
  time is the cache's bytes at an achievable fraction of HBM bandwidth. FlashAttention-2 splits
  the keys across blocks (flash-decoding, Dao et al. 2023) only when its blocks would not
  otherwise nearly fill the GPU: ``set_params_splitkv`` in its ``flash_api.cpp`` calls
  ``num_splits_heuristic`` with twice the SM count ("128 threads per block": two blocks per SM),
  which uses one split once blocks >= 0.8 x 2 x SMs. For one query token with grouped-query
  attention it packs a group's query heads into one block (``seqlenq_ngroups_swapped``), so the
  blocks are batch x KV heads.
  The split and unsplit kernels reach different fractions of the bandwidth (fitted).
- cuDNN's fused attention (``Efficiency.attention_kernel == "cudnn"``, what PyTorch's default
  SDPA dispatch runs for one-query decode on Hopper) streams the cache at its own fitted
  fraction of HBM bandwidth (measured: 4.3–4.7 TB/s once the batch fills the GPU, against
  2.4–2.7 for FlashAttention-2's unsplit kernel; data/h200_cudnn).
- Each block also does fixed work (loading its query tile, the softmax epilogue, writing the
  output) worth ``attn_kv_overhead`` keys (``attn_bwd_kv_overhead`` for the backward), which
  dominates short sequences.
- The softmax's exponentials run on the multi-function units, far slower than the tensor cores,
  and their count per score does not grow with the head dimension (FlashAttention-3, Shah et
  al. 2024, sec. 3.1): modelled as ``attn_softmax_head_dim`` extra head dimensions of matmul
  work, so a head of 64 reaches a lower fraction of peak than a head of 128.
- Either way, the memory floor of reading q, k, v and writing o holds, and the fixed cost of the
  call (kernel overhead plus ``attn_fixed_s`` for its setup and helper kernels) is added.
"""

from __future__ import annotations

import math

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.efficiency import Efficiency
from gpuplan.hwmodels.kernel_time import KernelTime
from gpuplan.hwmodels.power import throttled
from gpuplan.workloads.dtypes import dtype_bytes
from gpuplan.workloads.ops import Attention


def attention_time(acc, op: Attention, eff: Efficiency) -> KernelTime:
    """Time of one fused attention kernel (or ``op.count`` of them), as the kernel the
    efficiency names runs it: ``attention_kernel`` for a one-query decode,
    ``prefill_attention_kernel`` for the rest."""
    decode = op.seq_q < eff.attn_tile_q and op.pass_ == "fwd"
    kernel = eff.attention_kernel if decode else eff.prefill_attention_kernel
    if kernel == "math":
        return math_attention_time(acc, op, eff)
    memory_s = op.bytes / (acc.hbm_bytes_per_s * eff.hbm_fraction)
    fixed_s = (eff.kernel_overhead_s + eff.attn_fixed_s) * op.count
    if decode:
        decode_s = op.bytes / (acc.hbm_bytes_per_s * decode_hbm_fraction(acc, op, eff, kernel))
        return KernelTime(0.0, max(memory_s, decode_s), fixed_s)
    fraction = eff.attn_bwd_fraction if op.pass_ == "bwd" else eff.attn_fwd_fraction
    if op.pass_ == "bwd" and kernel in INFERENCE_ONLY:
        raise GpuplanError(f"attention kernel {kernel!r} has no backward (an inference "
                           "library): train with flash2, flash3, cudnn, efficient or math")
    if kernel == "flashinfer":  # its prefill follows FlashAttention-2's tiling (Ye et al. 2025,
        kernel = "flash2"  # sec. 3.2): priced at FlashAttention-2's fitted rate
    if kernel != "flash2":
        fraction *= eff.attn_kernel_rate[f"{kernel}_{'bwd' if op.pass_ == 'bwd' else 'fwd'}"]
    compute_s = _flash_work(acc, op, eff) / (acc.peak(_dtype(acc, op)) * fraction)
    compute_s = throttled(compute_s, eff, _dtype(acc, op))
    return KernelTime(compute_s, memory_s, fixed_s)


def _dtype(acc, op: Attention) -> str:
    return op.dtype if acc.supports(op.dtype) else "bf16"


def _flash_work(acc, op: Attention, eff: Efficiency) -> float:
    """The kernel's FLOPs with its waves, per-block fixed work and softmax (module docstring)."""
    blocks = op.batch * op.heads_q * math.ceil(op.seq_q / eff.attn_tile_q)
    n_sms = acc.n_sms or 1
    wave_factor = math.ceil(blocks / n_sms) * n_sms / blocks  # >= 1: idle SMs in the last wave
    keys = op.mean_keys_per_query
    kv_overhead = eff.attn_bwd_kv_overhead if op.pass_ == "bwd" else eff.attn_kv_overhead
    block_factor = (keys + kv_overhead) / keys  # fixed work per block, in keys
    d = (op.head_dim + op.v_head_dim) / 2
    softmax_factor = (d + eff.attn_softmax_head_dim) / d  # exp per score, whatever d is
    return op.flops * wave_factor * block_factor * softmax_factor


def decode_hbm_fraction(acc, op: Attention, eff: Efficiency, kernel: str) -> float:
    """Of HBM bandwidth, the KV-cache stream of a decode on ``kernel``."""
    if kernel == "cudnn":
        return eff.attn_decode_cudnn_hbm_fraction
    if kernel == "flash2":
        if decode_splits_keys(acc, op):
            return eff.attn_decode_hbm_fraction
        return eff.attn_decode_nosplit_hbm_fraction
    return eff.attn_kernel_rate[f"{kernel}_decode"]


def math_attention_time(acc, op: Attention, eff: Efficiency) -> KernelTime:
    """SDPA's math backend: QK^T and PV as batched GEMMs and a softmax over the materialized
    scores (every score written and read back), no causal skipping; the backward runs twice the
    GEMMs and twice the score traffic (dS from dP and P). PyTorch's
    ``_scaled_dot_product_attention_math`` (aten/src/ATen/native/transformers/attention.cpp)
    converts fp16/bf16 queries, keys and values to fp32 first unless
    ``torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)`` (off by default), so its
    GEMMs run at the fp32 (non-tensor-core, TF32 off by default) rate over fp32 scores, and it
    repeats GQA keys and values to every query head (``repeat_interleave``) before them."""
    e_in = dtype_bytes(op.dtype)
    upcast = e_in == 2 and acc.supports("fp32")
    work = "fp32" if upcast else _dtype(acc, op)
    e = 4 if upcast else e_in
    rows = op.batch * op.heads_q * op.seq_q
    rep = op.heads_q / op.heads_kv
    q_el = rows * op.head_dim
    o_el = rows * op.v_head_dim
    kv_el = op.batch * op.heads_kv * op.seq_kv * (op.head_dim + op.v_head_dim)
    gemm_flops = 2 * rows * op.seq_kv * (op.head_dim + op.v_head_dim)
    score_bytes = rows * op.seq_kv * e * 4  # write S, read S, write P, read P
    operand_bytes = (q_el + kv_el * rep + o_el) * e
    convert_bytes = (q_el + kv_el + o_el) * (e_in + e) if upcast else 0.0
    repeat_bytes = kv_el * e * (1 + rep) if rep > 1 else 0.0
    # QK^T, softmax, PV and the scale; the fp32 casts of q, k, v and back; the two K/V repeats
    kernels = 4 + (4 if upcast else 0) + (2 if rep > 1 else 0)
    times = 2 if op.pass_ == "bwd" else 1
    rate = acc.peak(work) * eff.gemm_fraction(work)
    bw = acc.hbm_bytes_per_s * eff.hbm_fraction
    gemm_s = throttled(times * gemm_flops * op.count / rate, eff, work)
    # the GEMMs move their operands, write S and read P; the softmax (read S, write P), the
    # casts and the repeats are kernels of their own, which run after the GEMMs, not under them
    gemm_bytes = times * (operand_bytes + score_bytes / 2) * op.count
    other_s = (times * score_bytes / 2 + convert_bytes + repeat_bytes) * op.count / bw
    compute_s = max(gemm_s, gemm_bytes / bw) + other_s
    memory_s = gemm_bytes / bw + other_s
    fixed_s = (kernels * eff.kernel_overhead_s + eff.attn_fixed_s) * op.count * times
    return KernelTime(compute_s, memory_s, fixed_s)


# FlashAttention-2 flash_api.cpp: num_splits_heuristic(blocks, 2 * SMs, ...) returns one split
# once blocks >= 0.8 x its SM argument. Checked on an H200 (132 SMs) with the kernel names in
# data/decode_probe_h200/kernels.json: 128 blocks split, 256 do not.
ATTENTION_KERNELS = ("flash2", "flash3", "cudnn", "efficient", "math", "flashinfer")
INFERENCE_ONLY = ("flashinfer",)  # kernels with no backward pass
SPLIT_FILL = 0.8
BLOCKS_PER_SM = 2


def decode_splits_keys(acc, op: Attention) -> bool:
    """Whether FlashAttention-2 splits the keys of this decode across blocks."""
    if op.seq_q == 1 and op.heads_q > op.heads_kv:
        blocks = op.batch * op.heads_kv  # query heads of a group packed into one block
    else:
        blocks = op.batch * op.heads_q
    return blocks < SPLIT_FILL * BLOCKS_PER_SM * (acc.n_sms or 1)
