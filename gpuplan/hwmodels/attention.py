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
- A decode's matmuls are a floor too (``decode_compute_s``): an absorbed MLA decode over many
  heads is compute-bound (FlashMLA).
- Either way, the memory floor of reading q, k, v and writing o holds, and the fixed cost of the
  call (kernel overhead plus ``attn_fixed_s`` for its setup and helper kernels) is added.
"""

from __future__ import annotations

import dataclasses
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
    if kernel == "eager":
        return eager_attention_time(acc, op, eff)
    memory_s = op.bytes / (acc.hbm_bytes_per_s * eff.hbm_fraction)
    fixed_s = (eff.kernel_overhead_s + eff.attn_fixed_s) * op.count
    if decode:
        decode_s = op.bytes / (acc.hbm_bytes_per_s * decode_hbm_fraction(acc, op, eff, kernel))
        return KernelTime(decode_compute_s(acc, op, eff), max(memory_s, decode_s), fixed_s)
    fraction = eff.attn_bwd_fraction if op.pass_ == "bwd" else eff.attn_fwd_fraction
    if op.pass_ == "bwd" and kernel in INFERENCE_ONLY:
        raise GpuplanError(f"attention kernel {kernel!r} has no backward (an inference "
                           "library): train with flash2, flash3, cudnn, efficient or math")
    if kernel == "flashinfer":  # its prefill follows FlashAttention-2's tiling (Ye et al. 2025,
        kernel = "flash2"  # sec. 3.2): priced at FlashAttention-2's fitted rate
    if kernel != "flash2":
        fraction *= kernel_rate(eff, kernel, op.pass_, op.head_dim)
    compute_s = _flash_work(acc, op, eff) / (acc.peak(_dtype(acc, op)) * fraction)
    compute_s = throttled(compute_s, eff, _dtype(acc, op))
    return KernelTime(compute_s, memory_s, fixed_s)


# Heads wider than this run their own backward tiles: cuDNN's sm90 backward at head_dim 256 keeps
# 64x64 tiles with the whole head in shared memory and reaches about 0.68 of its head-128 rate
# (data/h200_stacks/run4/kernel_profile.json: 407 against 597 TFLOP/s at 2k tokens); a rate key
# with the ``_d256`` suffix prices such heads where one is known.
WIDE_HEAD_DIM = 128


def kernel_rate(eff: Efficiency, kernel: str, pass_: str, head_dim: int) -> float:
    """``attn_kernel_rate`` of ``kernel`` in ``pass_`` (against FlashAttention-2): its wide-head
    entry (``<kernel>_<pass>_d256``) for heads wider than ``WIDE_HEAD_DIM`` where one exists."""
    return eff.attn_kernel_rate[rate_key(eff.attn_kernel_rate, kernel, pass_, head_dim)]


def rate_key(rates, kernel: str, pass_: str, head_dim: int) -> str:
    key = f"{kernel}_{'bwd' if pass_ == 'bwd' else 'fwd'}"
    wide = f"{key}_d256"
    return wide if head_dim > WIDE_HEAD_DIM and wide in rates else key


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


def decode_compute_s(acc, op: Attention, eff: Efficiency) -> float:
    """The matmul floor of a decode: its FLOPs at the forward kernel's fraction of the 16-bit
    (or the op's own) peak. Grouped-query decodes do a few FLOPs a byte and never reach it; an
    absorbed MLA decode does ``2 heads_q (576 + 512)`` per 576-element latent, which on many
    heads is compute-bound (FlashMLA's README: "up to 3000 GB/s in memory-bound configuration
    and 580 TFLOPS in computation-bound configuration on H800 SXM5")."""
    work = next((d for d in (_dtype(acc, op), "fp16", "fp32") if acc.supports(d)), None)
    if work is None:  # a device that publishes no matmul rate: no floor known
        return 0.0
    return throttled(op.flops / (acc.peak(work) * eff.attn_fwd_fraction), eff, work)


def decode_hbm_fraction(acc, op: Attention, eff: Efficiency, kernel: str) -> float:
    """Of HBM bandwidth, the KV-cache stream of a decode on ``kernel``."""
    if kernel == "cudnn":
        return eff.attn_decode_cudnn_hbm_fraction
    if kernel == "flash2":
        if decode_splits_keys(acc, op):
            return eff.attn_decode_hbm_fraction
        return eff.attn_decode_nosplit_hbm_fraction
    return eff.attn_kernel_rate[f"{kernel}_decode"]


# --- SDPA's math backend: the ATen kernels it runs ------------------------------------------
#
# ``_scaled_dot_product_attention_math`` (aten/src/ATen/native/transformers/attention.cpp) is a
# composite of ATen ops, each its own kernel. On an H200 (torch 2.11, data/h200_stacks/run4/
# kernel_profile.json, ``python3 -m gpuplan.validate.stack_campaign --only kprofile``) one bf16
# call runs, in order: three fp32 casts of q, k, v (fp16/bf16 inputs are upcast unless
# ``torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)``, off by default); under GQA the
# two K/V repeats to every query head (``repeat_interleave``); the scale's multiply of q and of the
# repeated k; under ``is_causal`` the mask's build (a bool fill, ``tril``, two fills and a
# ``where`` into a float mask of [Sq, Skv]) and its add to the scores; QK^T as an fp32 batched
# GEMM (a cuBLAS GEMV for one query); ``_safe_softmax``: the softmax, ``isneginf``, an ``all`` over
# each row, a fill and a ``where`` that zeroes fully masked rows; PV; and the casts of the output
# and of the attention weights back to bf16. The backward adds the cast of dO, the four GEMMs
# (dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q), the softmax's backward, the ``where``'s
# backward (a multiply over the scores), the scale's two multiplies, the casts of dq, dk, dv and,
# under GQA, the sums of dk and dv over the repeated heads. The kernels fall into six classes
# by how they move memory, each at its own share of HBM bandwidth (``MATH_HBM_FRACTION``).
# Medians over the profile's nine math cases, by ``python3 -m gpuplan.validate.fit_math_sdpa``
# (its printout; tests/test_fit_math_sdpa.py checks these against it): vectorized elementwise
# kernels (multiplies, softmax, isneginf, the casts back to bf16), the unrolled casts to fp32,
# TensorIterator's unvectorized ``elementwise_kernel<128, 2>`` (the ``where``, the mask's add),
# the strided K/V repeats, the row reductions (``all``, the GQA sums) and the one-query QK^T GEMV
# over the transposed keys (two profiles: 0.19 with 16 MHA heads of 64, 0.40 with 32 GQA heads
# of 128; the median of the two is what is known).
MATH_HBM_FRACTION = {"vectorized": 0.88, "cast": 0.43, "unvectorized": 0.59, "strided": 0.40,
                     "reduce": 0.22, "gemv": 0.29}
MATH_GEMV_CLASS = "gemv"  # the one-query QK^T: a cuBLAS GEMV over the transposed keys


def math_attention_kernels(op: Attention) -> list[tuple[str, str, float, int]]:
    """The memory-bound kernels of one SDPA math-backend call (``op.pass_`` fwd or bwd, one of
    ``op.count``): (label, class, bytes, launches), in the order they run (section above)."""
    e_in = dtype_bytes(op.dtype)
    upcast = e_in == 2
    e = 4 if upcast else e_in
    rep = op.heads_q / op.heads_kv  # query heads per K/V head: the repeats' copies
    b, hq, sq, skv = op.batch, op.heads_q, op.seq_q, op.seq_kv
    q_el = b * hq * sq * op.head_dim
    o_el = b * hq * sq * op.v_head_dim
    kv_el = b * op.heads_kv * skv * op.kv_elems
    k_rep_el = b * hq * skv * op.head_dim  # the scale multiplies the repeated keys
    scores = b * hq * sq * skv
    out: list[tuple[str, str, float, int]] = []
    if op.pass_ == "bwd":
        if upcast:
            out.append(("cast dO", "cast", o_el * (e_in + e), 1))
        out += [("softmax backward", "vectorized", scores * 3 * e, 1),
                ("where backward", "vectorized", scores * 3 * e, 1),
                ("scale backward", "vectorized", (q_el + k_rep_el) * 2 * e, 2)]
        if rep > 1:
            out.append(("sum over repeated heads", "reduce", kv_el * (rep + 1) * e, 4))
        if upcast:
            out.append(("cast dq, dk, dv", "vectorized", (q_el + kv_el) * (e + e_in), 3))
        return out
    if upcast:
        out.append(("cast q, k, v", "cast", (q_el + kv_el) * (e_in + e), 3))
    if rep > 1:
        out.append(("repeat k, v", "strided", kv_el * (1 + rep) * e, 2))
    out.append(("scale", "vectorized", (q_el + k_rep_el) * 2 * e, 2))
    if op.causal:
        out += [("causal mask", "vectorized", sq * skv * (2 + 2 * e), 5),
                ("mask add", "unvectorized", scores * 2 * e, 1)]
    out += [("softmax", "vectorized", scores * 2 * e, 1),
            ("isneginf", "vectorized", scores * (e + 1), 1),
            ("all", "reduce", scores, 1),
            ("where", "unvectorized", scores * (1 + 2 * e), 2)]
    if upcast:
        out.append(("cast out, weights", "vectorized", (o_el + scores) * (e + e_in), 2))
    return out


def math_attention_gemms(op: Attention) -> list[tuple[str, int, int, int]]:
    """The fp32 (upcast) GEMMs of one math-backend call, per (batch, query head): (label, m, n,
    k), QK^T and PV forward, the four products of the backward."""
    sq, skv, d, dv = op.seq_q, op.seq_kv, op.head_dim, op.v_head_dim
    if op.pass_ == "bwd":
        return [("dV = P^T dO", skv, dv, sq), ("dP = dO V^T", sq, skv, dv),
                ("dQ = dS K", sq, d, skv), ("dK = dS^T Q", skv, d, sq)]
    return [("QK^T", sq, skv, d), ("PV", sq, dv, skv)]


def math_attention_time(acc, op: Attention, eff: Efficiency) -> KernelTime:
    """SDPA's math backend as the ATen kernels it runs (section above), one after another: the
    GEMMs at the GEMM model's rate in the dtype they run (fp32 for 16-bit inputs: the backend
    upcasts, and TF32 is off by default), the other kernels at their class's share of HBM
    bandwidth, every launch its fixed cost, no causal skipping (the mask is added to every
    score)."""
    work = "fp32" if dtype_bytes(op.dtype) == 2 and acc.supports("fp32") else _dtype(acc, op)
    return composite_time(acc, op, eff, work, math_attention_gemms(op),
                          math_attention_kernels(op))


def composite_time(acc, op: Attention, eff: Efficiency, work: str, gemms, kernels) -> KernelTime:
    """Attention as ATen kernels run one after another (SDPA's math backend, transformers' eager
    attention): batched ``gemms`` (label, m, n, k per (batch, query head)) in ``work``'s dtype at
    the GEMM model's rate, the memory-bound ``kernels`` (label, class, bytes, launches) at their
    class's share of HBM bandwidth (``MATH_HBM_FRACTION``), each launch its fixed cost."""
    from gpuplan.hwmodels.gemm import gemm_bytes, gemm_time

    heads = op.batch * op.heads_q
    busy_s = memory_s = 0.0
    launches = 0
    for label, m, n, k in gemms:
        # one batched GEMM over every (batch, head): its tiles fill the GPU together (priced as
        # the heads' rows stacked), each head reading its own operands
        compute_s = gemm_time(acc, m * heads, n, k, work, eff).compute_s
        fraction = eff.gemm_hbm_fraction
        if label == "QK^T" and m == 1:  # a GEMV over the transposed keys
            fraction = MATH_HBM_FRACTION[MATH_GEMV_CLASS]
        gemm_memory_s = heads * gemm_bytes(m, n, k, work) / (acc.hbm_bytes_per_s * fraction)
        busy_s += max(compute_s, gemm_memory_s)
        memory_s += gemm_memory_s
        launches += 1
    for _, klass, nbytes, n in kernels:
        t = nbytes / (acc.hbm_bytes_per_s * MATH_HBM_FRACTION[klass])
        busy_s += t
        memory_s += t
        launches += n
    count = op.count
    fixed_s = (launches * eff.kernel_overhead_s + eff.attn_fixed_s) * count
    # kernels run one after another: the busy time is the sum of each kernel's bound
    return KernelTime(busy_s * count, memory_s * count, fixed_s)


# --- transformers' eager attention: the ATen kernels it runs ----------------------------------
#
# ``eager_attention_forward`` (transformers 5.25, models/llama/modeling_llama.py; the records'
# 5.17 runs the same code) is what a model built with ``attn_implementation="eager"`` runs, and
# what transformers picks for a family whose ``PreTrainedModel`` says ``_supports_sdpa = False``
# (gpt-oss: models/gpt_oss/modeling_gpt_oss.py line 378). Its ops, each its own kernel, in the
# input's dtype (no upcast, unlike SDPA's math backend): ``repeat_kv`` of K and V to every query
# head under GQA (an expand and a reshape: one copy each), ``matmul(q, k^T)`` (a batched GEMM;
# the transpose is a view), ``* scaling``, ``+ attention_mask`` (a [batch, 1, Sq, Skv] mask,
# always passed to eager attention, broadcast over the heads), then
# - most families: ``softmax(..., dtype=torch.float32)`` and ``.to(query.dtype)``;
# - with sinks (gpt-oss, modeling_gpt_oss.py ``eager_attention_forward`` lines 225-253):
#   ``cat`` of the sink column (a row of Skv + 1), ``max`` over each row, its subtraction and
#   ``softmax(..., dtype=combined_logits.dtype)`` (16-bit), the sink column dropped by a view;
# and ``matmul(probs, v)`` (the slice's row stride is Skv + 1: cuBLAS takes it as a leading
# dimension, no copy). Dropout at p=0 runs no kernel (ATen ``_dropout``). Every score is
# computed: a causal or sliding-window mask only adds -inf. The backward is autograd's of those
# ops: the four GEMMs, the softmax's backward, with sinks the slice's (a zero fill and a copy),
# the max's (a row sum of the subtraction's gradient, a zero fill and a scatter) and the
# gradients' sum, the scale's multiply and, under GQA, the sums over the repeated heads. Each
# kernel is priced in the class of the SDPA math profile it matches (``MATH_HBM_FRACTION``;
# the ``cat`` and the strided copies as ``strided``, the broadcast binaries as
# ``unvectorized``): no constant of its own.


def eager_attention_kernels(op: Attention) -> list[tuple[str, str, float, int]]:
    """The memory-bound kernels of one ``eager_attention_forward`` call (``op.pass_`` fwd or
    bwd): (label, class, bytes, launches), in the order they run (section above)."""
    e = dtype_bytes(op.dtype)
    rep = op.heads_q / op.heads_kv
    b, hq, sq, skv = op.batch, op.heads_q, op.seq_q, op.kv_read
    kv_el = b * op.heads_kv * skv * op.kv_elems
    rows = b * hq * sq
    scores = rows * skv
    wide = rows * (skv + 1)  # with the sink column
    out: list[tuple[str, str, float, int]] = []
    if op.pass_ == "bwd":
        if op.sinks:
            out += [("slice backward", "vectorized", wide * e, 1),
                    ("slice backward copy", "strided", scores * 2 * e, 1),
                    ("softmax backward", "vectorized", wide * 3 * e, 1),
                    ("max backward sum", "reduce", wide * e, 1),
                    ("max backward scatter", "vectorized", wide * e + rows * e, 2),
                    ("gradient sum", "vectorized", wide * 3 * e, 1),
                    ("sink gradient", "reduce", rows * e, 1),
                    ("scale backward", "unvectorized", scores * 2 * e, 1)]
        else:
            out += [("cast backward", "vectorized", scores * (e + 4), 1),
                    ("softmax backward", "vectorized", scores * (8 + e), 1),
                    ("scale backward", "vectorized", scores * 2 * e, 1)]
        if rep > 1:
            out.append(("sum over repeated heads", "reduce", kv_el * (rep + 1) * e, 2))
        return out
    if rep > 1:
        out.append(("repeat k, v", "strided", kv_el * (1 + rep) * e, 2))
    out += [("scale", "vectorized", scores * 2 * e, 1),
            ("mask add", "unvectorized", scores * 2 * e + b * sq * skv * e, 1)]
    if op.sinks:
        out += [("cat sink column", "strided", (scores + rows + wide) * e, 1),
                ("row max", "reduce", wide * e, 1),
                ("subtract max", "unvectorized", wide * 2 * e + rows * e, 1),
                ("softmax", "vectorized", wide * 2 * e, 1)]
    else:
        out += [("softmax", "vectorized", scores * (e + 4), 1),
                ("cast weights", "vectorized", scores * (4 + e), 1)]
    return out


def eager_attention_gemms(op: Attention) -> list[tuple[str, int, int, int]]:
    """The GEMMs of one eager call, per (batch, query head): the math backend's, over the keys
    the call holds (a sliding layer's cache keeps its window: ``Attention.kv_read``)."""
    return math_attention_gemms(dataclasses.replace(op, seq_kv=op.kv_read))


def eager_attention_time(acc, op: Attention, eff: Efficiency) -> KernelTime:
    """transformers' ``eager_attention_forward`` as its ATen kernels (section above), the GEMMs
    in the input's 16-bit dtype (autocast and the model's dtype run matmul in bf16)."""
    return composite_time(acc, op, eff, _dtype(acc, op), eager_attention_gemms(op),
                          eager_attention_kernels(op))


# FlashAttention-2 flash_api.cpp: num_splits_heuristic(blocks, 2 * SMs, ...) returns one split
# once blocks >= 0.8 x its SM argument. Checked on an H200 (132 SMs) with the kernel names in
# data/decode_probe_h200/kernels.json: 128 blocks split, 256 do not.
ATTENTION_KERNELS = ("flash2", "flash3", "cudnn", "efficient", "math", "flashinfer", "eager")
# composites of ATen kernels, priced op by op (no fused kernel): SDPA's math backend and
# transformers' ``eager_attention_forward`` (``eager_attention_time`` above)
COMPOSITE_KERNELS = ("math", "eager")
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
