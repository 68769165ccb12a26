"""One GPU's kernels for one micro-batch: a block, the embedding and the LM head, as lists of
ops for the one-GPU kernel models to price (``workloads.operators``).

What each parallel degree changes in the kernels (Megatron-LM's layout):
- ``tp`` divides heads and FFN widths (``layer_forward(tp=)``); the LM head and the embedding are
  vocabulary-parallel (V / tp columns each).
- ``sp`` (sequence parallelism) runs the ops outside the tensor-parallel region — norms, residual
  adds, dropouts — on tokens / tp (Korthikanti et al. 2022, sec. 4.2.2).
- ``cp`` gives each GPU seq / cp tokens; attention is load-balanced ring attention, so each GPU does
  1/cp of the causal attention work: modelled as a non-causal kernel of seq/cp queries against
  seq/2 keys (Megatron-Core's zig-zag split).
- ``ep`` leaves each GPU ``n_experts / ep`` experts receiving ``ep`` times the tokens each; the
  busiest GPU sees ``load`` times the mean (capacity factor or imbalance).
- ``precision='fp8'`` runs the GEMMs in fp8, the rest in bf16, with the casts of the recipe
  that goes with the elementwise implementation (``sim.parallel.fp8``: TE fused, torchao eager
  or compiled).
- ``attention='unfused'`` is the pre-flash kernel sequence Megatron-LM ran in 2021-2022: a batched
  QK^T GEMM, a fused scale-mask-softmax, dropout on the probabilities, a batched PV GEMM; the full
  s x s scores are computed (no causal skipping) and kept for the backward.
"""

from __future__ import annotations

import math
from dataclasses import replace

from gpuplan.sim.parallel.shape import Shape
from gpuplan.workloads.dtypes import dtype_bytes
from gpuplan.workloads.eager_rmsnorm import with_eager_rmsnorm
from gpuplan.workloads.operators import (
    backward_of,
    embedding_forward,
    layer_forward,
    logit_softcap,
)
from gpuplan.workloads.ops import Attention, Elementwise, Gemm, Memory, Op

# ops outside the tensor-parallel region (what sequence parallelism splits)
SP_OPS = ("attn_norm", "attn_residual", "mlp_norm", "mlp_residual", "final_norm", "position_add",
          "attn_post_norm", "mlp_post_norm")
CORE = "attn_core"  # prefix of the unfused attention-core kernels (what selective recomputes)


def _gemm_dtype(ops: list[Op], precision: str) -> list[Op]:
    if precision == "bf16":
        return ops
    return [replace(op, dtype=precision) if isinstance(op, Gemm) else op for op in ops]



# the ops that run on the fp32 residual stream (``Stack.residual_dtype``), and the Linear
# modules that each cast it to bf16 in a layer: per GEMM of the list, the torch modules it
# stands for (transformers keeps q, k and v, and gate and up, as separate nn.Linear)
_STREAM_OPS = ("attn_norm", "mlp_norm", "attn_residual", "mlp_residual", "rope_q", "rope_k",
               "final_norm")
_MODULES = {"qkv_proj": 3, "gate_up_proj": 2, "shared_gate_up_proj": 2}
_NOT_READERS = ("o_proj",)  # reads the attention's bf16 output (its width may be d_model)


def stream_readers(cfg, ops: list[Op]) -> int:
    """The torch modules of ``ops`` that read the residual stream's normed output (each an
    ``nn.Linear`` autocast casts its input for: q, k, v, gate, up, a router, the LM head)."""
    return sum(_MODULES.get(op.name, 1) for op in ops
               if isinstance(op, Gemm) and op.k == cfg.d_model and op.name not in _NOT_READERS
               and not op.name.startswith("expert_"))  # fmt: skip


def _stream_dtype(cfg, ops: list[Op], dtype: str, tokens: int) -> tuple[list[Op], list[Op]]:
    """``ops`` with the residual stream's ops in ``dtype``, and autocast's casts of it into the
    Linear modules that read it (forward; and their backward, listed apart): each reads
    ``dtype`` and writes bf16 (the backward: bf16 in, ``dtype`` out)."""
    if dtype == "bf16":
        return ops, []
    out = [replace(op, dtype=dtype) if isinstance(op, Elementwise) and op.name in _STREAM_OPS
           else op for op in ops]  # fmt: skip
    readers = stream_readers(cfg, ops)
    if not readers:
        return out, []
    per = tokens * cfg.d_model * (dtype_bytes(dtype) + dtype_bytes("bf16"))
    out.append(Memory(name="autocast_input_casts", op="copy", bytes_moved=per, count=readers))
    return out, [Memory(name="autocast_input_casts.bwd", op="copy", bytes_moved=per,
                        count=readers)]  # fmt: skip



# the ops of an MoE block that run on the experts' fp32 inputs under autocast: the routed rows'
# gather and scatter, the expert GEMMs (``_grouped_mm``: one fp32 mm per expert in ATen's
# fallback) and their activation; the router is an ``nn.Linear`` (autocast: bf16)
_EXPERT_ROWS = ("permute", "unpermute")


def _expert_dtype(ops: list[Op], dtype: str) -> list[Op]:
    """The MoE block's expert ops in ``dtype``. A grouped GEMM that is not bf16 launches one
    kernel per expert: ``_grouped_mm``'s CUDA fast path is CUTLASS for bf16 only, other dtypes
    take ``_grouped_mm_fallback`` (ATen native/GroupedMMUtils.h), an ``mm`` per group."""
    if dtype == "bf16":
        return ops
    out = []
    for op in ops:
        if isinstance(op, Gemm | Elementwise) and (op.name.startswith("expert_")
                                                   or op.name in _EXPERT_ROWS):
            op = replace(op, dtype=dtype)
            if isinstance(op, Gemm) and op.launches is not None:
                op = replace(op, launches=op.count)
        elif isinstance(op, Memory) and op.name == "expert_grouping":  # gathers of routed rows
            op = replace(op, bytes_moved=op.bytes_moved * dtype_bytes(dtype) / dtype_bytes("bf16"))
        out.append(op)
    return out


def _split_sp(ops: list[Op], tp: int) -> list[Op]:
    return [
        replace(op, tokens=math.ceil(op.tokens / tp))
        if isinstance(op, Elementwise) and op.name in SP_OPS
        else op
        for op in ops
    ]


def _experts(ops: list[Op], shape: Shape) -> list[Op]:
    """Each GPU keeps n_experts/ep experts, each receiving ep x load the mean tokens."""
    out = []
    for op in ops:
        if op.name.startswith("expert_"):
            count = op.count // shape.ep
            if isinstance(op, Gemm):
                launches = None if op.launches is None else min(op.launches, count)
                op = replace(op, m=math.ceil(op.m * shape.ep * shape.load), count=count,
                             launches=launches)  # fmt: skip
            elif isinstance(op, Elementwise) and op.count < shape.ep:
                # one kernel over every routed row of the experts (a grouped block's
                # activation): this GPU's n/ep experts get ep x load their mean rows each
                op = replace(op, tokens=math.ceil(op.tokens * shape.load))
            elif isinstance(op, Elementwise):
                op = replace(op, tokens=math.ceil(op.tokens * shape.ep * shape.load), count=count)
        out.append(op)
    return out


def _attention(ops: list[Op], shape: Shape) -> tuple[list[Op], list[Op]]:
    """Forward ops with the attention kernel as the shape runs it, and extra backward ops."""
    fwd, extra_bwd = [], []
    for op in ops:
        if not isinstance(op, Attention):
            fwd.append(op)
        elif shape.attention == "unfused":
            core, core_bwd = _unfused_core(op)
            fwd += core
            extra_bwd += core_bwd
        elif shape.cp > 1:  # balanced ring attention: 1/cp of the causal work per GPU
            fwd.append(replace(op, seq_kv=max(1, shape.seq // 2), causal=False))
        else:
            fwd.append(op)
    return fwd, extra_bwd


def _unfused_core(op: Attention) -> tuple[list[Op], list[Op]]:
    """QK^T, scale-mask-softmax, dropout, PV on the full s x s scores (heads stacked along m).

    Megatron-LM's softmax is its own fused kernel (``FusedScaleMaskSoftmax``: scale, causal mask
    and softmax in one pass, a row held in registers), so it is priced in the ``fused`` class
    of hand- or compiler-fused bandwidth-bound kernels, not as torch's softmax; the dropout on
    the probabilities is torch's dropout (read, write and a one-byte keep mask).
    """
    rows = op.batch * op.heads_q * op.seq_q
    scores = rows * op.seq_kv
    e = dtype_bytes(op.dtype)
    fwd: list[Op] = [
        Gemm(name=f"{CORE}.qk", m=rows, n=op.seq_kv, k=op.head_dim, dtype=op.dtype),
        Memory(name=f"{CORE}.softmax", op="fused", bytes_moved=scores * 2 * e),  # x -> y
        Memory(name=f"{CORE}.dropout", op="dropout_add", bytes_moved=scores * (2 * e + 1)),
        Gemm(name=f"{CORE}.pv", m=rows, n=op.v_head_dim, k=op.seq_kv, dtype=op.dtype),
    ]
    bwd = [  # backward_of skips Memory ops: their backwards are listed here
        Memory(name=f"{CORE}.dropout.bwd", op="dropout_add", bytes_moved=scores * (2 * e + 1)),
        Memory(name=f"{CORE}.softmax.bwd", op="fused", bytes_moved=scores * 3 * e),  # y, dy -> dx
    ]
    return fwd, bwd


def layer_ops(cfg, shape: Shape, layer: int) -> tuple[list[Op], list[Op]]:
    """(forward, backward) kernels of block ``layer`` for one micro-batch on one GPU."""
    fwd, extra_bwd = layer_forward_ops(cfg, shape, layer)
    return fwd, backward_of(fwd) + extra_bwd


def layer_forward_ops(cfg, shape: Shape, layer: int,
                      base: list[Op] | None = None) -> tuple[list[Op], list[Op]]:  # fmt: skip
    """(forward kernels, backward kernels beyond ``backward_of`` of them) of block ``layer``;
    ``base``: the block's ``layer_forward`` list at this micro-batch, tokens and tp, if known."""
    grouped = shape.grouped_experts and cfg.is_moe_layer(layer)
    # a memoized ``base`` is the per-expert list (op_memo): a grouped MoE block is listed anew
    fwd = base if base is not None and not grouped else layer_forward(
        cfg, batch=shape.micro_batch, seq=shape.seq // shape.cp, layer=layer, tp=shape.tp,
        grouped_experts=grouped,
    )  # fmt: skip
    if shape.sp and shape.tp > 1:
        fwd = _split_sp(fwd, shape.tp)
    if cfg.is_moe_layer(layer):
        fwd = _experts(fwd, shape)
    fwd, extra_bwd = _attention(fwd, shape)
    fwd = _gemm_dtype(fwd, shape.precision)
    if cfg.is_moe_layer(layer):
        fwd = _expert_dtype(fwd, shape.expert_dtype)
    if shape.residual_dtype != "bf16":
        fwd, cast_bwd = _stream_dtype(cfg, fwd, shape.residual_dtype,
                                      shape.micro_batch * (shape.seq // shape.cp))  # fmt: skip
        extra_bwd = extra_bwd + cast_bwd
    if shape.transformers_norm:
        fwd, norm_bwd = with_eager_rmsnorm(fwd)
        extra_bwd = extra_bwd + norm_bwd
    return fwd, extra_bwd


def head_ops(cfg, shape: Shape) -> tuple[list[Op], list[Op]]:
    """Final norm, vocabulary-parallel LM head and cross-entropy of one micro-batch."""
    t, tp = shape.tokens, shape.tp
    v_local = math.ceil(cfg.vocab_size / tp)
    norm_tokens = math.ceil(t / tp) if shape.sp else t
    fwd: list[Op] = [
        Elementwise(
            name="final_norm",
            op=cfg.norm,
            tokens=norm_tokens,
            hidden=cfg.d_model,
            pass_="fwd",
            dtype="bf16",
        ),
        Gemm(name="lm_head", m=t, n=v_local, k=cfg.d_model, dtype="bf16"),
        Memory(name="cross_entropy", op="cross_entropy", bytes_moved=t * v_local * 10),
    ]
    fwd = _gemm_dtype(fwd, shape.precision)
    head, cast_bwd = _stream_dtype(cfg, fwd[:2], shape.residual_dtype, t)  # final norm in fp32
    bwd = [Memory(name="cross_entropy.bwd", op="cross_entropy", bytes_moved=t * v_local * 10)]
    norm_bwd: list[Op] = []
    if shape.transformers_norm:
        head, norm_bwd = with_eager_rmsnorm(head)
    softcap = logit_softcap(cfg, tokens=t, dtype="bf16", vocab=v_local)
    return (head + softcap + fwd[2:],
            bwd + backward_of(softcap) + backward_of(head) + norm_bwd + cast_bwd)


def embedding_ops(cfg, shape: Shape) -> tuple[list[Op], list[Op]]:
    """Vocabulary-parallel embedding lookup and its scatter-add backward (fp32 table grads)."""
    t = shape.tokens
    fwd = embedding_forward(cfg, tokens=t, dtype="bf16")
    table = cfg.vocab_size * cfg.d_model * 4 / shape.tp
    bwd = [
        Memory(name="embedding.bwd", op="embedding", bytes_moved=table + 2 * t * cfg.d_model * 2)
    ]
    scale = [op for op in fwd if op.name == "embedding_scale"]  # Gemma's normalizer
    return fwd, backward_of(scale) + bwd

