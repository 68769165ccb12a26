"""Memory per GPU under a parallel strategy: closed forms of the degrees, for numpy arrays or numbers.

Terms, for the pipeline stage that needs the most (each kind of stage of ``stage.StageKinds`` is
priced: the first stage holds the most activations and the embedding, the last the LM head and
the logits, a middle stage of an uneven split may hold more blocks; the peak is the largest):

- weights, gradients, optimizer state: the stage's parameters / tp (expert parameters also / ep) at
  the state precision's bytes per parameter (``workloads.memory.PRECISION_BYTES``; Megatron's
  mixed precision is 2 + 4 + 12); ZeRO stage 1/2/3 divides optimizer / + gradients / + weights by
  the gradient-reduction group dp x cp (Rajbhandari et al. 2020, Fig. 1). fp8 compute adds the
  fp8 weight copies (1 B/param, TransformerEngine keeps them for the step).
- activations (Korthikanti et al. 2022): one block per token from ``layer_activation_bytes`` (tp
  splits the tensor-parallel part, sequence parallelism also the rest); the unfused attention of
  2021-2022 Megatron also keeps 5 a s bytes of scores per token (softmax output, dropout mask and
  output; their eq. 1) unless selective recomputation drops them; full recomputation keeps each
  block's input plus one block's full activations while it is recomputed. Under 1F1B stage i
  holds min(p - i, m) micro-batches of its blocks (the first p, the last one); GPipe all m; the
  interleaved schedule's stage i holds 2 (p - i - 1) + (v - 1) p + 1 chunks of 1/v of its
  blocks, at most m v (Megatron-LM's warm-up count, schedules.py), which for the first stage is
  p (1 + (p - 1) / (p v)) micro-batches (Korthikanti sec. 4.2.3). The last stage also holds its
  logits (16-bit, fp32 upcast and fp32 softmax: 10 B per vocabulary entry, / tp).
- communication buffers: the gathered activation of a TP/SP collective, pipeline send and receive
  buffers, ZeRO-3's gathered layer (current and prefetched), MoE dispatch/combine buffers. Data-
  parallel reductions run in place on the gradient buffer (Megatron's contiguous grad buffer,
  DeepSpeed's contiguous gradients), so they add nothing beyond the gradients; PyTorch DDP's
  default (gradient_as_bucket_view=False) keeps a flat copy of them in its buckets
  (``grad_buckets``, ``stacks.training.TrainingRuntime.ddp_bucket_copy``).
- fragmentation: 5% of the allocated bytes, a named floor (GMLake, Guo et al. ASPLOS 2024, measure
  far more on some large-model runs); cuda_context: 0.5 GB outside PyTorch's allocator (context,
  cuBLAS and NCCL workspaces; an order of magnitude, not a measurement).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import numpy as np

from gpuplan.sim.parallel.stage import StageKinds
from gpuplan.units import GB
from gpuplan.workloads.memory import PRECISION_BYTES, layer_activation_bytes
from gpuplan.workloads.model import ModelConfig
from gpuplan.workloads.params import (
    embedding_params,
    ffn_params,
    final_norm_params,
    layer_params,
    lm_head_params,
)

ACT_BYTES = 2  # 16-bit activations
FRAGMENTATION = 0.05
CUDA_CONTEXT_BYTES = 0.5 * GB
LOGIT_BYTES = 10  # 16-bit logits, their fp32 upcast and the fp32 log-softmax
# FSDP blocks kept whole through a pipelined step (state_bytes): bf16 (param_dtype) weights, and
# the fp32 (reduce_dtype) gradient FSDP2 accumulates while gradient sync is off
WHOLE_BLOCK_BYTES = 2
WHOLE_GRAD_BYTES = 4
SCHEDULE_CODES = {"gpipe": 0, "1f1b": 1, "interleaved": 2}
RECOMPUTE_CODES = {"none": 0, "selective": 1, "full": 2}


@dataclass(frozen=True, slots=True)
class ModelFacts:
    """Sizes of ``cfg`` the closed forms need, computed once per model."""

    n_layers: int
    n_moe_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    kv_dim: int  # key + value elements per KV head
    vocab: int
    top_k: int
    dense_layer_params: int  # a dense block
    moe_shared_params: int  # an MoE block without its routed experts
    moe_expert_params: int  # an MoE block's routed experts
    embedding_params: int
    head_params: int  # LM head (the tied embedding's copy on the last stage when pp > 1)
    tied: bool
    act_rep: tuple[float, float]  # per token, outside the TP region: (dense, moe)
    act_split: tuple[float, float]  # per token, inside it: (dense, moe)
    unfused_saved_delta: float  # per token: flash-only tensors an unfused attention does not keep
    moe_flags: tuple[bool, ...]  # whether each block, first to last, is an MoE block
    # per token under op-level selective checkpointing (``sac_saved_bytes``): (dense, moe)
    sac_rep: tuple[float, float] = (0.0, 0.0)
    sac_split: tuple[float, float] = (0.0, 0.0)
    # per token, beyond ``act_rep``: what transformers' eager blocks keep on an fp32 residual
    # stream under autocast (``autocast_stream_facts``): (dense, moe) block, and the head's
    stream_rep: tuple[float, float] = (0.0, 0.0)
    stream_head: float = 0.0


def _first_blocks(cfg: ModelConfig) -> tuple[int, int | None]:
    """(the first dense block, else block 0; the first MoE block, else None): the blocks whose
    counts stand for every block of their kind."""
    moe_layer = next((i for i in range(cfg.n_layers) if cfg.is_moe_layer(i)), None)
    dense_layer = next((i for i in range(cfg.n_layers) if not cfg.is_moe_layer(i)), 0)
    return dense_layer, moe_layer


@functools.cache
def model_facts(cfg: ModelConfig) -> ModelFacts:
    dense_layer, moe_layer = _first_blocks(cfg)
    experts = cfg.n_experts * ffn_params(cfg, cfg.d_ff_expert) if cfg.is_moe else 0
    moe_total = layer_params(cfg, moe_layer) if moe_layer is not None else 0
    moe_or_dense = moe_layer if moe_layer is not None else dense_layer  # block 0 may be MoE
    acts = [layer_activation_bytes(cfg, tokens=1, layer=layer) for layer in (dense_layer, moe_or_dense)]
    head = lm_head_params(cfg) or cfg.vocab_size * cfg.d_model
    return ModelFacts(
        n_layers=cfg.n_layers,
        n_moe_layers=cfg.n_moe_layers,
        d_model=cfg.d_model,
        n_heads=cfg.n_heads,
        n_kv_heads=cfg.n_kv_heads,
        kv_dim=cfg.qk_head_dim + cfg.v_dim_per_head,
        vocab=cfg.vocab_size,
        top_k=cfg.top_k,
        dense_layer_params=layer_params(cfg, dense_layer),
        moe_shared_params=moe_total - experts,
        moe_expert_params=experts,
        embedding_params=embedding_params(cfg),
        head_params=head + final_norm_params(cfg),
        tied=cfg.tied_embeddings,
        act_rep=(acts[0].replicated_bytes, acts[1].replicated_bytes),
        act_split=(acts[0].split_bytes, acts[1].split_bytes),
        unfused_saved_delta=cfg.n_heads * cfg.v_dim_per_head * ACT_BYTES + 4 * cfg.n_heads,
        moe_flags=tuple(cfg.is_moe_layer(i) for i in range(cfg.n_layers)),
        sac_rep=tuple(sac_saved_bytes(cfg, i)[0] for i in (dense_layer, moe_or_dense)),
        sac_split=tuple(sac_saved_bytes(cfg, i)[1] for i in (dense_layer, moe_or_dense)),
    )


def autocast_stream_facts(f: ModelFacts, cfg: ModelConfig, stack, precision: str = "bf16"):
    """``f`` with the activations ``stack`` keeps beyond the 16-bit count when it runs
    transformers' eager modelling code on an fp32 residual stream (``shape.residual_dtype_of``
    and ``shape.transformers_norm_of``: hf-transformers under autocast over fp32 weights);
    ``f`` itself otherwise. The stream is fp32 because the embedding's output is: ``nn.Embedding``
    is on no autocast list (aten/src/ATen/autocast_mode.cpp), so its fp32 weight gives fp32
    hidden states, and every residual add ``residual + hidden_states`` (modeling_llama.py
    ``LlamaDecoderLayer.forward``) promotes the bf16 sub-block output back to fp32."""
    from gpuplan.sim.parallel.shape import (
        expert_dtype_of,
        residual_dtype_of,
        transformers_norm_of,
    )

    stream = residual_dtype_of(stack, precision)
    if stream == "bf16" or not transformers_norm_of(stack):
        return f
    rep, head = _stream_saved(cfg, stream, expert_dtype_of(stack, precision))
    return replace(f, stream_rep=rep, stream_head=head)


@functools.cache
def _stream_saved(cfg: ModelConfig, stream: str, expert_dtype: str) -> tuple:
    """Per token: ((dense, moe) block, head) bytes that transformers' eager code keeps for the
    backward on a ``stream``-dtype residual stream, beyond ``layer_activation_bytes``' 16-bit
    count (its block input, normed inputs and mid-block residual at 2 B each, SwiGLU's 3 f).
    Per block, saved by autograd (derivatives.yaml: what each op's backward reads):
    - each of the two norms (``operators.eager_rmsnorm``): its fp32 input (``pow`` and the
      ``x * rsqrt`` multiply save it) and the fp32 ``x * rsqrt`` (the weight's multiply saves
      it, the weight requiring grad): 4 + 4 B against the count's 2 + 2;
    - autocast's bf16 copy of the norm's fp32 output for every ``nn.Linear`` reading it
      (``kernel_lists.stream_readers``: q, k, v, gate, up, a router): autocast casts an activation
      per op (``cached_cast`` caches leaf weights only), and each linear saves its own copy;
    - SwiGLU's silu output (``act_fn(gate) * up``: the multiply saves both; eager, not fused);
    - an MoE block's routed rows and their expert intermediates in the experts' dtype
      (``shape.expert_dtype_of``: fp32 ``_grouped_mm`` under autocast).
    The head: the final norm's fp32 input and ``x * rsqrt``, and the LM head's bf16 copy."""
    from gpuplan.sim.parallel.kernel_lists import stream_readers
    from gpuplan.workloads.dtypes import dtype_bytes
    from gpuplan.workloads.operators import layer_forward

    es, ex, d = dtype_bytes(stream), dtype_bytes(expert_dtype), cfg.d_model
    swiglu = cfg.activation != "gelu"
    out = []
    for layer in _first_blocks(cfg):
        if layer is None:
            out.append(0.0)
            continue
        readers = stream_readers(cfg, layer_forward(cfg, batch=1, seq=1, dtype="bf16",
                                                    layer=layer))
        extra = d * (2 * 2 * (es - ACT_BYTES) + ACT_BYTES * readers)
        if not cfg.is_moe_layer(layer):
            extra += ACT_BYTES * cfg.d_ff if swiglu else 0.0
        else:
            f = cfg.d_ff_expert
            width = 4 if swiglu else 2
            routed = cfg.top_k * ((width * f + d) * ex - ((width - (1 if swiglu else 0)) * f + d)
                                  * ACT_BYTES)  # fmt: skip
            extra += routed + (ACT_BYTES * f * cfg.n_shared_experts if swiglu else 0.0)
        out.append(float(extra))
    return (out[0], out[1]), float(d * (2 * es + ACT_BYTES))


def sac_saved_bytes(cfg: ModelConfig, layer: int) -> tuple[float, float]:
    """(outside, inside the TP region) bytes per token one block keeps under torchtitan's
    op-level selective checkpointing: its saved ops' outputs only (``_save_list``: every other
    matmul, in call order wq, wk, wv, wo, w1, w3, w2 the 1st, 3rd, 5th and 7th, so wq, wv, w1
    and w2, and SDPA's output with its fp32 log-sum-exp), plus the block input the recompute
    starts from; everything else is recomputed in the backward."""
    q = cfg.n_heads * cfg.qk_head_dim
    v = cfg.n_kv_heads * cfg.v_dim_per_head
    out = cfg.n_heads * cfg.v_dim_per_head
    ffn = cfg.top_k * cfg.d_ff_expert if cfg.is_moe_layer(layer) else cfg.d_ff
    outside = 2 * cfg.d_model * ACT_BYTES  # block input, w2's output
    inside = (q + v + ffn + out) * ACT_BYTES + 4 * cfg.n_heads
    return float(outside), float(inside)


def stage_params(f: ModelFacts, k: StageKinds, tp, ep):
    """(params per GPU of each kind of stage, of its blocks, of which expert), (K, ...)."""
    moe = k.moe
    expert = moe * f.moe_expert_params / (tp * ep)
    blocks = ((k.layers - moe) * f.dense_layer_params + moe * f.moe_shared_params) / tp + expert
    # one stage holds both ends when pp == 1; a tied head then shares the embedding table
    head = np.where(k.emb & f.tied, f.head_params - f.vocab * f.d_model, f.head_params)
    ends = k.emb * f.embedding_params + k.head * head
    return blocks + ends / tp, blocks, expert


def layer_act_per_token(f: ModelFacts, tp, sp, rc, seq, attention: str, kind: int,
                        selective: str = "attention-core"):  # fmt: skip
    """Activation bytes one block keeps per token (kind 0 dense, 1 MoE); ``selective``: what
    recompute=selective drops (the attention core, or all but op-level SAC's saved ops)."""
    rep_div = np.where(sp, tp, 1)
    keep = f.act_rep[kind] / rep_div + f.act_split[kind] / tp
    if selective == "op-sac":
        sac = f.sac_rep[kind] / rep_div + f.sac_split[kind] / tp
        keep_sel = np.where(rc == 1, sac, keep)
        block_input = f.d_model * ACT_BYTES / rep_div
        return np.where(rc == 2, block_input, keep_sel), keep
    if attention == "unfused":
        scores = 5.0 * f.n_heads * seq / tp  # Korthikanti eq. 1: 5 a s^2 b per block
        keep = keep - f.unfused_saved_delta / tp + np.where(rc == 0, scores, 0.0)
    block_input = f.d_model * ACT_BYTES / rep_div
    return np.where(rc == 2, block_input, keep), keep


def in_flight(k: StageKinds, *, pp, m, v, sched):
    """Micro-batches' worth of activations each kind of stage holds at its peak."""
    i = k.index
    one_f_one_b = np.minimum(pp - i, m)
    chunks = np.minimum(2 * (pp - i - 1) + (v - 1) * pp + 1, m * v)
    return np.where(sched == 0, m, np.where(sched == 2, chunks / v, one_f_one_b))


def activation_bytes(f: ModelFacts, k: StageKinds, *, tp, pp, cp, sp, mb, m, v, sched, rc, seq,
                     attention, selective: str = "attention-core"):  # fmt: skip
    """(activations each kind of stage keeps, one block's full activations), (K, ...)."""
    tokens = mb * seq / cp
    kept_d, full_d = layer_act_per_token(f, tp, sp, rc, seq, attention, 0, selective)
    kept_m, full_m = layer_act_per_token(f, tp, sp, rc, seq, attention, 1, selective)
    stage = tokens * ((k.layers - k.moe) * kept_d + k.moe * kept_m)
    held = stage * in_flight(k, pp=pp, m=m, v=v, sched=sched)
    working = np.where(
        (rc == 2) | ((rc == 1) & (selective == "op-sac")),  # one block recomputed at a time
        tokens * np.maximum(np.where(k.layers > k.moe, full_d, 0), np.where(k.moe > 0, full_m, 0)),
        0.0,
    )
    return held, working


def state_bytes(f: ModelFacts, params, expert, *, zero, dp, cp, ep, state_precision, fp8,
                pp_unsharded=False):  # fmt: skip
    """(weights, gradients, optimizer) bytes of ``params`` per GPU, ``expert`` of them experts.
    ``pp_unsharded``: FSDP blocks kept whole through a pipelined step
    (``stacks.training.pipeline_unsharded``): the sharded weights and gradients plus the whole
    16-bit weights and the whole gradients accumulated in fp32 (4 B)."""
    w, g, o = PRECISION_BYTES[state_precision]
    w = w + np.where(fp8, 1.0, 0.0)
    group = dp * cp  # expert parameters are replicated over group / ep GPUs only
    dense = params - expert

    def sharded(on):
        return np.where(on, dense / group + expert * ep / group, params)

    weights, grads = w * sharded(zero >= 3), g * sharded(zero >= 2)
    weights = np.where(pp_unsharded, w * sharded(True) + WHOLE_BLOCK_BYTES * params, weights)
    grads = np.where(pp_unsharded, g * sharded(True) + WHOLE_GRAD_BYTES * params, grads)
    return weights, grads, o * sharded(zero >= 1)


def memory_terms(
    f: ModelFacts,
    k: StageKinds,
    *,
    tp,
    pp,
    dp,
    cp,
    ep,
    sp,
    zero,
    mb,
    m,
    v,
    sched,
    rc,
    seq,
    precision_fp8,
    state_precision: str,
    attention: str,
    load,
    optimizer: str = "fused",
    grads_persist: bool = True,
    selective: str = "attention-core",
    pp_unsharded=False,
    grad_bucket_copy=False,
    root_unsharded: bool = False,
) -> dict:
    """Named memory terms (bytes) of the GPU that needs the most; arrays broadcast together.

    With ``grads_persist`` (a gradient buffer kept between steps, as Megatron and DDP keep it)
    every term is live at once. Without (``zero_grad(set_to_none=True)``, PyTorch's default)
    the peak is the larger of two moments: the end of the forward (activations, logits and
    autocast's 16-bit weight copies, no gradients yet) and the optimizer step (gradients, and
    the foreach AdamW's temporary of every parameter, ``step_time.FOREACH_OPTIMIZER_BYTES``);
    with more than one micro-batch per step (``m`` > 1) the first micro-batch's gradients stay
    allocated through the later forwards, so they count at the forward's end too.
    ``grad_bucket_copy``: where PyTorch DDP's buckets hold a flat copy of the gradients
    (``evaluate._bucket_copy``: replicated ones, ZeRO below 2;
    ``stacks.training.TrainingRuntime.ddp_bucket_copy``), allocated at both moments.
    ``root_unsharded``: FSDP2's 16-bit weights at the forward's end under ZeRO-3 are its root
    module's only (``TrainingRuntime.fsdp2_root_unsharded``; the blocks' are comm_buffers)."""
    stage_p, blocks_p, expert_p = stage_params(f, k, tp, ep)
    held, working = activation_bytes(
        f, k, tp=tp, pp=pp, cp=cp, sp=sp, mb=mb, m=m, v=v, sched=sched, rc=rc, seq=seq,
        attention=attention, selective=selective,
    )  # fmt: skip
    tokens = mb * seq / cp
    # an fp32 stream's tensors (``autocast_stream_facts``): bf16 compute only (an fp8 recipe
    # keeps its stream in bf16: ``shape.residual_dtype_of``), nothing recomputed
    stream = tokens / np.where(sp, tp, 1) * (
        ((k.layers - k.moe) * f.stream_rep[0] + k.moe * f.stream_rep[1])
        * in_flight(k, pp=pp, m=m, v=v, sched=sched) + k.head * f.stream_head)
    held = held + np.where(np.asarray(precision_fp8) | (np.asarray(rc) != 0), 0.0, stream)
    kw = dict(zero=zero, dp=dp, cp=cp, ep=ep, state_precision=state_precision, fp8=precision_fp8)
    weights, grads, optim = state_bytes(f, stage_p, expert_p, pp_unsharded=pp_unsharded, **kw)
    # parameters held, after sharding (whole blocks: their 16-bit copies are in the weights)
    local_w = np.where(pp_unsharded, 0.0, weights / PRECISION_BYTES[state_precision][0])
    terms = {
        "weights": weights,
        "gradients": grads,
        "optimizer": optim,
        "activations": held + working,
        "logits": k.head * (tokens * f.vocab / tp * LOGIT_BYTES),
        "comm_buffers": comm_buffer_bytes(
            f, k, tp=tp, pp=pp, zero=zero, tokens=tokens, blocks_p=blocks_p, sp=sp, ep=ep,
            load=load,
        ),  # fmt: skip
    }
    if state_precision == "bf16-mixed":  # autocast's cache of 16-bit weight copies
        terms["weight_cast_cache"] = 2.0 * local_w
        if root_unsharded:  # FSDP2 at ZeRO-3: the root's gathered bf16 weights stay
            ends = stage_p - blocks_p  # embedding, final norm, head of the stage, / tp
            terms["weight_cast_cache"] = np.where((zero >= 3) & ~np.asarray(pp_unsharded),
                                                  2.0 * ends, terms["weight_cast_cache"])
    if optimizer == "foreach":  # one moment-sized temporary (FOREACH_TEMP_BYTES)
        terms["optimizer_temp"] = optim * FOREACH_TEMP_BYTES[state_precision] / (
            PRECISION_BYTES[state_precision][2]
        )
    # DistributedDataParallel(gradient_as_bucket_view=False), the default, keeps its buckets
    # beside param.grad: "the saved memory size will be equal to the total gradients size" when
    # set True (torch/nn/parallel/distributed.py docstring; pytorch/pytorch#41954); the buckets
    # are allocated once and never freed by zero_grad, in the gradients' own dtype
    terms["grad_buckets"] = np.where(grad_bucket_copy, grads, 0.0)
    if not grads_persist:  # whole gradients accumulate across micro-batches: all live at once
        moment = _larger_moment(terms, m)
        terms = {k: np.where(pp_unsharded, v, moment[k]) for k, v in terms.items()}
    total = sum(terms.values())
    peak = np.argmax(np.where(k.count > 0, total, -np.inf), axis=0)
    picked = {name: pick(value, peak, len(k.count)) for name, value in terms.items()}
    allocated = sum(picked.values())
    picked["fragmentation"] = FRAGMENTATION * allocated
    picked["cuda_context"] = np.full_like(np.asarray(allocated, dtype=float), CUDA_CONTEXT_BYTES)
    return picked


# torch.optim.AdamW(foreach=True) allocates one moment-sized tensor per parameter at its step
# (``torch._foreach_sqrt(exp_avg_sqs)``, torch/optim/adamw.py): bytes of one moment element.
FOREACH_TEMP_BYTES = {"bf16-mixed": 4, "bf16-mixed-megatron": 4, "bf16": 2, "bf16-deepspeed": 4,
                      "bf16-deepspeed-2022": 4}
_STEP_TERMS = ("weights", "gradients", "optimizer", "optimizer_temp", "comm_buffers",
               "grad_buckets")  # fmt: skip
_FORWARD_TERMS = ("weights", "optimizer", "activations", "logits", "comm_buffers",
                  "weight_cast_cache", "grad_buckets")  # fmt: skip


def _larger_moment(terms: dict, m=1) -> dict:
    """Each term as it stands at whichever moment needs more: the forward's end or the step.
    With ``m`` > 1 micro-batches a step, the gradients of the first are alive at the later
    forwards' end: ``zero_grad(set_to_none=True)`` frees them once a step, before the first
    (measured: 4.0 B/param more peak at accumulation 4 than at 1, data/h200_dist_train)."""
    grads_fwd = np.asarray(m) > 1
    fwd_of = {k: np.where(grads_fwd, 1.0, 0.0) if k == "gradients" else float(k in _FORWARD_TERMS)
              for k in terms}  # fmt: skip
    fwd = sum(v * fwd_of[k] for k, v in terms.items())
    opt = sum(v for k, v in terms.items() if k in _STEP_TERMS)
    at_step = np.asarray(opt) > np.asarray(fwd)
    return {
        k: np.where(at_step, v if k in _STEP_TERMS else 0.0, v * fwd_of[k])
        for k, v in terms.items()
    }


def pick(values, index, kinds: int):
    """``values`` (K, ...) at kind ``index`` (...) of each strategy."""
    values = np.broadcast_to(values, (kinds, *np.shape(index)))
    return np.take_along_axis(values, np.asarray(index)[None], axis=0)[0]


def comm_buffer_bytes(f: ModelFacts, k: StageKinds, *, tp, pp, zero, tokens, blocks_p, sp, ep,
                      load):  # fmt: skip
    """Buffers the collectives of one step hold at the peak, per kind of stage."""
    act = tokens * f.d_model * ACT_BYTES
    tp_buf = np.where(tp > 1, act, 0.0)
    pp_buf = np.where(pp > 1, 2 * act / np.where(sp, tp, 1), 0.0)
    gathered_layer = 2.0 * 2 * blocks_p / np.maximum(k.layers, 1)  # bf16, current + prefetch
    z3 = np.where(zero >= 3, gathered_layer, 0.0)
    moe_buf = 2 * tokens * f.top_k * f.d_model * ACT_BYTES * load
    ep_buf = np.where((ep > 1) & (k.moe > 0), moe_buf, 0.0)
    return tp_buf + pp_buf + z3 + ep_buf
