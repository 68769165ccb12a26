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
  block's input plus one block's full activations while it is recomputed. fp8 GEMMs under
  Transformer Engine cache their inputs in fp8 (``fp8_saved_inputs``: the norm outputs and the
  down projection's input at 1 byte, ``workloads.memory.fp8_cached_input_saving``). Under 1F1B
  stage i
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

docs/memory.md has the terms with their sources and the truth set of production layouts that
checks them (``validate/published/memory_truth``).
"""

from __future__ import annotations

import numpy as np

from gpuplan.sim.parallel.fp8 import WEIGHT_COPY_BYTES
from gpuplan.sim.parallel.model_facts import ACT_BYTES, ModelFacts
from gpuplan.sim.parallel.stage import StageKinds
from gpuplan.units import GB
from gpuplan.workloads.memory import PRECISION_BYTES

FRAGMENTATION = 0.05
CUDA_CONTEXT_BYTES = 0.5 * GB
LOGIT_BYTES = 10  # 16-bit logits, their fp32 upcast and the fp32 log-softmax
# FSDP blocks kept whole through a pipelined step (state_bytes): bf16 (param_dtype) weights, and
# the fp32 (reduce_dtype) gradient FSDP2 accumulates while gradient sync is off
WHOLE_BLOCK_BYTES = 2
WHOLE_GRAD_BYTES = 4
SCHEDULE_CODES = {"gpipe": 0, "1f1b": 1, "interleaved": 2}
RECOMPUTE_CODES = {"none": 0, "selective": 1, "full": 2}



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
                        selective: str = "attention-core", fp8_inputs=False):  # fmt: skip
    """Activation bytes one block keeps per token (kind 0 dense, 1 MoE); ``selective``: what
    recompute=selective drops (the attention core, or all but op-level SAC's saved ops);
    ``fp8_inputs``: the GEMM inputs are cached in fp8 (``ModelFacts.fp8_rep_saving``)."""
    rep_div = np.where(sp, tp, 1)
    keep = f.act_rep[kind] / rep_div + f.act_split[kind] / tp
    keep = keep - np.where(fp8_inputs, f.fp8_rep_saving[kind] / rep_div
                           + f.fp8_split_saving[kind] / tp, 0.0)  # fmt: skip
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
                     attention, selective: str = "attention-core", fp8_inputs=False):  # fmt: skip
    """(activations each kind of stage keeps, one block's full activations), (K, ...)."""
    tokens = mb * seq / cp
    kept_d, full_d = layer_act_per_token(f, tp, sp, rc, seq, attention, 0, selective, fp8_inputs)
    kept_m, full_m = layer_act_per_token(f, tp, sp, rc, seq, attention, 1, selective, fp8_inputs)
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
    """(weights, gradients, optimizer) bytes of ``params`` per GPU, ``expert`` of them experts;
    ``fp8``: the GEMM recipe's code (``fp8.PRECISION_CODES``; a flag: fp8 or bf16), whose weight
    copies add ``fp8.WEIGHT_COPY_BYTES`` a parameter.
    ``pp_unsharded``: FSDP blocks kept whole through a pipelined step
    (``stacks.training.pipeline_unsharded``): the sharded weights and gradients plus the whole
    16-bit weights and the whole gradients accumulated in fp32 (4 B)."""
    w, g, o = PRECISION_BYTES[state_precision]
    w = w + np.asarray(WEIGHT_COPY_BYTES)[np.asarray(fp8, dtype=np.int64)]
    group = dp * cp  # expert parameters are replicated over group / ep GPUs only
    dense = params - expert

    def sharded(on):
        return np.where(on, dense / group + expert * ep / group, params)

    weights, grads = w * sharded(zero >= 3), g * sharded(zero >= 2)
    weights = np.where(pp_unsharded, w * sharded(True) + WHOLE_BLOCK_BYTES * params, weights)
    grads = np.where(pp_unsharded, g * sharded(True) + WHOLE_GRAD_BYTES * params, grads)
    return weights, grads, o * sharded(zero >= 1)


def memory_terms(f: ModelFacts, k: StageKinds, *, tp, pp, dp, cp, ep, sp, zero, mb, m, v, sched,
                 rc, seq, precision_fp8, state_precision: str, attention: str, load,
                 optimizer: str = "fused", grads_persist: bool = True,
                 selective: str = "attention-core", pp_unsharded=False, grad_bucket_copy=False,
                 root_unsharded: bool = False, fp8_saved_inputs: bool = False) -> dict:  # fmt: skip
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
    module's only (``TrainingRuntime.fsdp2_root_unsharded``; the blocks' are comm_buffers).
    ``fp8_saved_inputs``: fp8 GEMMs cache their inputs in fp8 (``TrainingRuntime``)."""
    stage_p, blocks_p, expert_p = stage_params(f, k, tp, ep)
    held, working = activation_bytes(
        f, k, tp=tp, pp=pp, cp=cp, sp=sp, mb=mb, m=m, v=v, sched=sched, rc=rc, seq=seq,
        attention=attention, selective=selective,
        fp8_inputs=(np.asarray(precision_fp8) != 0) & fp8_saved_inputs)  # fmt: skip
    tokens = mb * seq / cp
    # an fp32 stream's tensors (``autocast_stream_facts``): bf16 compute only (an fp8 recipe keeps
    # its stream in bf16: ``shape.residual_dtype_of``), nothing recomputed
    stream = _stream_bytes(f, k, tokens=tokens, tp=tp, sp=sp, pp=pp, m=m, v=v, sched=sched)
    held = held + np.where((np.asarray(precision_fp8) != 0) | (np.asarray(rc) != 0), 0.0, stream)
    kw = dict(zero=zero, dp=dp, cp=cp, ep=ep, state_precision=state_precision, fp8=precision_fp8)
    weights, grads, optim = state_bytes(f, stage_p, expert_p, pp_unsharded=pp_unsharded, **kw)
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
        terms["weight_cast_cache"] = _weight_cast_cache(
            weights, stage_p, blocks_p, zero=zero, state_precision=state_precision,
            pp_unsharded=pp_unsharded, root_unsharded=root_unsharded)  # fmt: skip
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
    return _at_peak(terms, k)


def _stream_bytes(f: ModelFacts, k: StageKinds, *, tokens, tp, sp, pp, m, v, sched):
    """What an fp32 residual stream keeps beyond the 16-bit count (``ModelFacts.stream_rep``,
    ``stream_head``) on each kind of stage, its micro-batches in flight included."""
    return tokens / np.where(sp, tp, 1) * (
        ((k.layers - k.moe) * f.stream_rep[0] + k.moe * f.stream_rep[1])
        * in_flight(k, pp=pp, m=m, v=v, sched=sched) + k.head * f.stream_head)


def _weight_cast_cache(weights, stage_p, blocks_p, *, zero, state_precision: str, pp_unsharded,
                       root_unsharded: bool):  # fmt: skip
    """Autocast's cache of 16-bit weight copies on each kind of stage (``stage_p`` parameters,
    ``blocks_p`` of them its blocks')."""
    # parameters held, after sharding (whole blocks: their 16-bit copies are in the weights)
    local_w = np.where(pp_unsharded, 0.0, weights / PRECISION_BYTES[state_precision][0])
    cache = 2.0 * local_w
    if root_unsharded:  # FSDP2 at ZeRO-3: the root's gathered bf16 weights stay
        ends = stage_p - blocks_p  # embedding, final norm, head of the stage, / tp
        cache = np.where((zero >= 3) & ~np.asarray(pp_unsharded), 2.0 * ends, cache)
    return cache


def _at_peak(terms: dict, k: StageKinds) -> dict:
    """``terms`` of each strategy's kind of stage that needs the most, with the allocator's
    fragmentation and the CUDA context on top."""
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
                      "bf16-deepspeed-2022": 4, "bf16-grads-megatron": 4}
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
