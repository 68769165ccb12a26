"""One GPU's compute for one micro-batch: a block, the embedding and the LM head, as the one-GPU
kernel models price them (``workloads.operators`` + ``hwmodels.price``).

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
from dataclasses import dataclass, replace

from gpuplan.sim.estimate.breakdown import Item, priced_items
from gpuplan.sim.estimate.composite import _as_run, layer_groups
from gpuplan.sim.parallel.fp8 import fp8_cast_ops
from gpuplan.workloads.dtypes import dtype_bytes
from gpuplan.workloads.eager_rmsnorm import with_eager_rmsnorm
from gpuplan.workloads.operators import backward_of, embedding_forward, layer_forward
from gpuplan.workloads.ops import Attention, Elementwise, Gemm, Memory, Op

# ops outside the tensor-parallel region (what sequence parallelism splits)
SP_OPS = ("attn_norm", "attn_residual", "mlp_norm", "mlp_residual", "final_norm", "position_add")
CORE = "attn_core"  # prefix of the unfused attention-core kernels (what selective recomputes)


@dataclass(frozen=True, slots=True, kw_only=True)
class Shape:
    """What one GPU runs for one micro-batch (everything the kernel list depends on)."""

    micro_batch: int
    seq: int  # full sequence length
    tp: int = 1
    cp: int = 1
    sp: bool = False
    ep: int = 1
    load: float = 1.0  # busiest expert GPU's tokens over the mean
    precision: str = "bf16"
    attention: str = "flash"
    # the dtype the routed experts' GEMMs and activation run in (``Stack.moe_autocast_dtype``
    # under autocast over fp32 weights; bf16 otherwise): see ``expert_dtype_of``
    expert_dtype: str = "bf16"
    # the routed experts as grouped GEMMs over the experts that receive tokens (``Stack.moe``;
    # ``workloads.feed_forward.moe_block(grouped=True)``), else one GEMM per expert
    grouped_experts: bool = False
    # the dtype of the residual stream, norms and RoPE (``Stack.residual_dtype`` under autocast
    # over fp32 weights; bf16 otherwise): see ``_stream_dtype``
    residual_dtype: str = "bf16"
    # the RMSNorms as transformers' eager code runs them (``transformers_norm_of``): eight ATen
    # kernels forward and autograd's over them backward (``workloads.eager_rmsnorm``)
    transformers_norm: bool = False

    @property
    def tokens(self) -> int:
        return self.micro_batch * self.seq // self.cp


@dataclass(frozen=True, slots=True)
class Cost:
    """Priced kernels of one micro-batch on one GPU, forward and backward, and the CPU time of
    issuing their torch calls (``hwmodels.launch``: per call, plus the autograd engine's work
    per backward call)."""

    fwd: tuple[Item, ...]
    bwd: tuple[Item, ...]
    host_s: float = 0.0

    @property
    def fwd_s(self) -> float:
        return sum(i.time_s for i in self.fwd)

    @property
    def bwd_s(self) -> float:
        return sum(i.time_s for i in self.bwd)

    def time_s(self, *, prefix: str = "", category: str = "") -> float:
        """Forward + backward time of the kernels whose name starts with ``prefix`` and whose
        class is ``category`` (either may be empty)."""
        return sum(
            i.time_s
            for i in self.fwd + self.bwd
            if i.op.startswith(prefix) and (not category or i.category == category)
        )

    def fwd_time_s(self, *, prefix: str = "") -> float:
        return sum(i.time_s for i in self.fwd if i.op.startswith(prefix))

    def flops(self, phase: str) -> float:
        return sum(i.flops for i in (self.fwd if phase == "fwd" else self.bwd))


def _gemm_dtype(ops: list[Op], precision: str) -> list[Op]:
    if precision == "bf16":
        return ops
    return [replace(op, dtype=precision) if isinstance(op, Gemm) else op for op in ops]


def expert_dtype_of(stack, precision: str) -> str:
    """The dtype ``stack``'s routed experts run in when training at ``precision``: its
    ``moe_autocast_dtype`` where it trains under autocast over fp32 weights in bf16 (the experts'
    inputs and weights stay fp32: autocast_mode.cpp casts no ``_grouped_mm``), else bf16."""
    return stack.moe_autocast_dtype if _autocast_over_fp32(stack, precision) else "bf16"


def transformers_norm_of(stack) -> bool:
    """Whether ``stack`` runs its RMSNorms as transformers' eager ``LlamaRMSNorm`` does
    (``workloads.eager_rmsnorm.eager_rmsnorm``): stacks that run transformers' modelling code
    (``repeat_kv_masked``, hf-transformers and torch-compile) with eager elementwise kernels
    (Inductor fuses the norm into one kernel). Prefill, decode and training all ask this."""
    return (stack is not None and getattr(stack, "repeat_kv_masked", False)
            and stack.elementwise == "eager")


def residual_dtype_of(stack, precision: str) -> str:
    """The dtype of ``stack``'s residual stream when training at ``precision``: its
    ``residual_dtype`` under autocast over fp32 weights in bf16, else bf16."""
    return stack.residual_dtype if _autocast_over_fp32(stack, precision) else "bf16"


def _autocast_over_fp32(stack, precision: str) -> bool:
    """Whether ``stack`` trains at ``precision`` under autocast over fp32 weights in bf16 (where
    its ``moe_autocast_dtype`` and ``residual_dtype`` apply)."""
    return stack is not None and precision == "bf16" and stack.mixed_precision == "autocast"


def stack_shape_fields(stack, precision: str, is_moe: bool) -> dict:
    """The ``Shape`` fields ``stack`` sets for a training micro-batch at ``precision``: its
    experts' dtype and grouping (MoE models only), its residual stream's dtype, its norms."""
    return dict(expert_dtype=expert_dtype_of(stack, precision) if is_moe else "bf16",
                grouped_experts=is_moe and grouped_experts_of(stack, precision),
                residual_dtype=residual_dtype_of(stack, precision),
                transformers_norm=transformers_norm_of(stack))  # fmt: skip


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


def grouped_experts_of(stack, precision: str) -> bool:
    """Whether a training step on ``stack`` at ``precision`` lists its routed experts as
    grouped GEMMs (``Stack.moe``): where they are ``_grouped_mm`` calls over autocast's fp32
    inputs (``expert_dtype_of``), as transformers' ``grouped_mm_experts_forward`` runs them
    eagerly: the experts that receive tokens, one activation over every routed row, and one
    fp32 ``mm`` per expert (``_expert_dtype``). Other stacks keep one GEMM list per expert in
    training until their MoE steps are measured (torch-compile's one DSV2-Lite step: -6.6%
    as listed per expert, -29.6% grouped; the published Megatron runs are unchanged)."""
    return (stack is not None and stack.moe == "grouped_gemm"
            and expert_dtype_of(stack, precision) != "bf16")


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
    return head + fwd[2:], bwd + backward_of(head) + norm_bwd + cast_bwd


def embedding_ops(cfg, shape: Shape) -> tuple[list[Op], list[Op]]:
    """Vocabulary-parallel embedding lookup and its scatter-add backward (fp32 table grads)."""
    t = shape.tokens
    fwd = embedding_forward(cfg, tokens=t, dtype="bf16")
    table = cfg.vocab_size * cfg.d_model * 4 / shape.tp
    bwd = [
        Memory(name="embedding.bwd", op="embedding", bytes_moved=table + 2 * t * cfg.d_model * 2)
    ]
    return fwd, bwd


def _priced(ops: list[Op], acc, eff, phase: str, kernels: dict | None) -> tuple[Item, ...]:
    """``priced_items`` of ``ops``, each distinct (kernel, phase) priced once per ``kernels``
    memo: the shapes of a search share most of their kernels (every ep or sp variant of a
    micro-batch size and tp runs the same attention and dense GEMMs)."""
    if kernels is None:
        return tuple(priced_items(ops, acc, eff, phase=phase))
    out: list[Item] = []
    for op in ops:
        key = (op, phase)
        if key not in kernels:
            kernels[key] = priced_items((op,), acc, eff, phase=phase)
        out += kernels[key]
    return tuple(out)


def _cost(ops: tuple[list[Op], list[Op]], acc, eff, impl: str = "fused",
          kernels: dict | None = None) -> Cost:  # fmt: skip
    fwd, bwd = (_as_run(o, impl) for o in ops)
    cast_fwd, cast_bwd = fp8_cast_ops(ops[0], impl)  # an fp8 recipe's casts (sim.parallel.fp8)
    fwd, bwd = fwd + cast_fwd, bwd + cast_bwd
    return cost_of(_priced(fwd, acc, eff, "fwd", kernels), _priced(bwd, acc, eff, "bwd", kernels),
                   eff)  # fmt: skip


def cost_of(fwd_items: tuple[Item, ...], bwd_items: tuple[Item, ...], eff) -> Cost:
    """The ``Cost`` of priced forward and backward items: the host's time is every torch call's
    launch, plus the autograd engine's share for each backward call."""
    calls = sum(i.host_calls for i in fwd_items + bwd_items)
    bwd_calls = sum(i.host_calls for i in bwd_items)
    host_s = calls * eff.host_launch_s + bwd_calls * eff.autograd_op_s
    return Cost(fwd_items, bwd_items, host_s)


@dataclass(frozen=True, slots=True)
class MicroBatchCosts:
    """A micro-batch's costs on one GPU: each block group, the LM head and the embedding."""

    dense: Cost | None  # a dense block (None when every block is MoE)
    moe: Cost | None  # an MoE block (None for dense models)
    head: Cost
    embedding: Cost


def micro_batch_costs(cfg, shape: Shape, acc, eff, impl: str = "fused",
                      kernels: dict | None = None) -> MicroBatchCosts:  # fmt: skip
    """Price every distinct block of ``cfg`` and the end-stage work for ``shape``, with the
    elementwise kernels as ``impl`` runs them (fused, eager or compiled: ``sim.estimate.compilation``);
    ``kernels``: a memo of priced kernels shared between shapes."""
    by_kind: dict[str, Cost] = {}
    for layer, _count in layer_groups(cfg):
        kind = "moe" if cfg.is_moe_layer(layer) else "dense"
        by_kind[kind] = _cost(layer_ops(cfg, shape, layer), acc, eff, impl, kernels)
    return MicroBatchCosts(
        dense=by_kind.get("dense"),
        moe=by_kind.get("moe"),
        head=_cost(head_ops(cfg, shape), acc, eff, impl, kernels),
        embedding=_cost(embedding_ops(cfg, shape), acc, eff, impl, kernels),
    )


class CostCache:
    """Micro-batch costs by shape, priced once each: the few distinct shapes of a search."""

    def __init__(self, cfg, acc, eff, impl: str = "fused") -> None:
        self.cfg, self.acc, self.eff, self.impl = cfg, acc, eff, impl
        self._memo: dict[Shape, MicroBatchCosts] = {}
        self._kernels: dict = {}  # (kernel, phase) -> its items, shared by the shapes
        self._shared: dict[Shape, MicroBatchCosts] = {}  # by shape at ep=1, load=1
        self._by_op = None  # op_memo.OpMemoCosts, made on first use

    def __call__(self, shape: Shape) -> MicroBatchCosts:
        if shape not in self._memo:
            self._memo[shape] = self._price(shape)
        return self._memo[shape]

    def _price(self, shape: Shape) -> MicroBatchCosts:
        """A dense block, the head and the embedding do not depend on ep or the expert load:
        an MoE model's shapes that differ only there share them, and price the MoE block."""
        from gpuplan.sim.parallel.op_memo import PER_OP_IMPLS, OpMemoCosts

        if self.impl in PER_OP_IMPLS:  # each forward kernel's items priced once (op_memo)
            if self._by_op is None:
                self._by_op = OpMemoCosts(self.cfg, self.acc, self.eff, self.impl, self._kernels)
            return self._by_op(shape)
        args = (self.acc, self.eff, self.impl, self._kernels)
        if not self.cfg.is_moe or (shape.ep == 1 and shape.load == 1.0):
            return micro_batch_costs(self.cfg, shape, *args)
        base = replace(shape, ep=1, load=1.0)
        if base not in self._shared:
            self._shared[base] = micro_batch_costs(self.cfg, base, *args)
        shared = self._shared[base]
        moe_layer = next(i for i in range(self.cfg.n_layers) if self.cfg.is_moe_layer(i))
        moe = _cost(layer_ops(self.cfg, shape, moe_layer), *args)
        return replace(shared, moe=moe)

    def __len__(self) -> int:
        return len(self._memo)
