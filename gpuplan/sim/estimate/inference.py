"""Whole-model inference on one GPU as a stack runs it: a prefill step and a decode step, with
their time, peak memory and whether they fit.

What a stack changes here (``sim.stacks``):
- the KV cache of a decode. ``dynamic`` (Hugging Face ``DynamicCache.update``) appends with
  ``torch.cat`` along the sequence, so every step reads each layer's cached keys and values and
  writes them again with the new token: two copy kernels per layer moving twice the layer's
  cache, and for a moment the old and new tensors of one layer coexist. ``static`` preallocates
  ``max_cache_len`` positions and attention reads all of them under a mask (HF ``StaticCache``,
  gpt-fast). ``paged`` reads only the blocks in use (vLLM's PagedAttention, Kwon et al. 2023).
- the host: a framework's Python modules cost ``module_call_s`` each on top of the ops they
  issue (``module_calls``), hidden where the GPU runs longer;
- the logits of a prefill: every position (``all``, HF's default without ``logits_to_keep``) or
  only the last (``last``, what serving engines compute).

Hugging Face's MLA attention (DeepSeek-V2/V3 modelling code) caches the decompressed per-head
keys and values, not the latent: its KV bytes are those of multi-head attention over
``n_heads`` heads of ``qk_head_dim + v_head_dim`` elements.

Peak memory (bytes): weights, the KV cache, and the largest live working set of the step: for a
prefill, one block's hidden states and MLP intermediates and the logits; for a decode, the
logits and, under ``dynamic``, one layer's cache twice during its ``torch.cat``.
"""

from __future__ import annotations

import dataclasses

from gpuplan.errors import GpuplanError, check_choice, check_positive
from gpuplan.hwmodels.efficiency import queued
from gpuplan.sim.estimate.breakdown import Breakdown, Item, priced_items
from gpuplan.sim.estimate.composite import _as_run, _with_launch, layer_groups
from gpuplan.sim.runtime.serving.deployment import Deployment
from gpuplan.sim.runtime.serving.iteration import Batch, iteration_breakdown
from gpuplan.sim.runtime.serving.mla_forms import cache_bytes_per_token_layer, caches_latent
from gpuplan.sim.stacks import KV_CACHES, Stack
from gpuplan.sim.stacks.kernels import resolved_attention
from gpuplan.workloads.dtypes import dtype_bytes
from gpuplan.workloads.eager_rmsnorm import rmsnorm_pieces, with_eager_rmsnorm
from gpuplan.workloads.memory import kv_cache_bytes_per_sequence
from gpuplan.workloads.model import ModelConfig
from gpuplan.workloads.operators import (
    embedding_forward,
    head_forward,
    layer_forward,
    logit_softcap,
)
from gpuplan.workloads.ops import ATTN_MASK, Attention, Memory
from gpuplan.workloads.params import count_params

# nn.Module calls of one step of an HF decoder (modeling_llama.py): per block the decoder layer,
# two norms, the attention module and its four projections, the MLP module, its three
# projections and its activation (13); per step the model, the causal-LM wrapper, the
# embedding, the rotary embedding, the final norm and the LM head (6).
MODULES_PER_BLOCK = 13
MODULES_PER_STEP = 6
# An MoE block replaces the MLP's five (the MLP, three projections, the activation) with the
# sparse block, its router, its experts module and the experts' activation (4: modeling_mixtral
# ``MixtralSparseMoeBlock``), plus a dense MLP of five for shared experts (modeling_deepseek_v2
# ``DeepseekV2Moe.shared_experts``).
MODULES_PER_MOE_BLOCK = MODULES_PER_BLOCK - 5 + 4
MODULES_PER_SHARED_EXPERTS = 5


def module_calls(cfg: ModelConfig) -> int:
    moe = cfg.n_moe_layers
    per_moe = MODULES_PER_MOE_BLOCK + (MODULES_PER_SHARED_EXPERTS if cfg.n_shared_experts else 0)
    return MODULES_PER_BLOCK * (cfg.n_layers - moe) + per_moe * moe + MODULES_PER_STEP


def kv_bytes_per_token_layer(cfg: ModelConfig, stack: Stack, dtype: str) -> float:
    """KV-cache bytes of one token in one block as the stack stores it (module docstring)."""
    return cache_bytes_per_token_layer(cfg, stack.name, dtype)


def weight_bytes(cfg: ModelConfig, dtype: str) -> float:
    return count_params(cfg).total * dtype_bytes(dtype)


def _host_extra_s(cfg: ModelConfig, stack: Stack) -> float:
    host = stack.host
    return (module_calls(cfg) * host.module_call_s
            + cfg.n_moe_layers * host.moe_block_s) * host.speed_factor


def decode_deployment(
    acc, eff, cfg: ModelConfig, stack: Stack, *, cuda_graph: bool | None = None,
    kv_cache: str | None = None, max_cache_len: int | None = None, tp: int = 1,
) -> Deployment:
    """The serving deployment a decode step on ``stack`` is: one replica of ``tp`` GPUs, with
    the stack's elementwise kernels, host, CUDA graphs and KV cache."""
    kv_cache = kv_cache or stack.kv_cache
    check_choice("kv_cache", kv_cache, KV_CACHES)
    graph = stack.cuda_graph_decode if cuda_graph is None else cuda_graph
    if graph and kv_cache == "dynamic":
        raise GpuplanError("kv_cache='dynamic' cannot be replayed from a CUDA graph (its tensors "
                           "change shape every step): use --kv-cache static or paged")
    host_extra_s = _host_extra_s(cfg, stack)
    if kv_cache == "dynamic" and not graph and resolved_attention(stack, acc).decode == "cudnn":
        # a dynamic cache's length is new every step: cuDNN SDPA builds its graph for the
        # shape once a step (``HostModel.attention_plan_s``)
        host_extra_s += stack.host.attention_plan_s * stack.host.speed_factor
    if not graph:  # the torch calls of transformers' RMSNorm beyond the one the iteration counts
        # (``eff`` is the stack's: its ``host_launch_s`` carries the host's speed already)
        host_extra_s += transformers_rmsnorm_calls(cfg, stack) * eff.host_launch_s
    # a serving engine's decode step carries its runtime's CPU work per iteration and per
    # sequence, its graph buckets and all-reduce: what ``gpuplan serve --stack`` prices
    # (``on_stack.deployment_fields``), so that the two are one iteration
    runtime = _runtime_fields(stack, tp=tp, gpu=acc.key, graph=graph)
    return Deployment(
        model=cfg, acc=acc, eff=queued(eff), tp=tp, cuda_graph=graph, impl=stack.elementwise,
        kv_cache=kv_cache, host_extra_s=host_extra_s, stack=stack.name,
        decode_context_tokens=max_cache_len if kv_cache == "static" else None,
        grouped_experts=stack.moe == "grouped_gemm", moe_glue=stack.moe_glue,
        repeat_kv_masked=stack.repeat_kv_masked,
        host_overlap=stack.host.device_overlap,
        # a compiled model's call before its CUDA graph replays (``HostModel.graph_call_s``)
        iteration_overhead_s=(stack.host.graph_call_s * stack.host.speed_factor
                              if graph and stack.host.mode == "compiled" else 0.0)
        + runtime.pop("iteration_overhead_s", 0.0),
        **runtime,
    )


def _runtime_fields(stack: Stack, *, tp: int, gpu: str, graph: bool) -> dict:
    """The ``Deployment`` fields of ``stack``'s serving runtime (none without one): its CPU
    time per iteration and per sequence, its all-reduce kernels and, under its CUDA graphs, the
    decode buckets."""
    if stack.serving is None:
        return {}
    from gpuplan.sim.runtime.serving.on_stack import deployment_fields

    f = deployment_fields(stack, tp=tp, gpu=gpu)
    keys = ("iteration_overhead_s", "seq_overhead_s", "all_reduce") + (
        ("decode_buckets",) if graph else ())
    return {k: f[k] for k in keys}


def decode_breakdown(
    acc, eff, cfg: ModelConfig, stack: Stack, *, batch: int, context: int, dtype: str = "bf16",
    cuda_graph: bool | None = None, kv_cache: str | None = None, max_cache_len: int | None = None,
    tp: int = 1,
) -> Breakdown:
    """One new token for each of ``batch`` sequences through the whole model (embedding to LM
    head and the sampler's logits), with ``context`` tokens already cached, as ``stack`` runs
    it: the serving simulator's iteration (``serving.iteration_breakdown``) of that batch, and
    its peak memory."""
    check_positive("batch", batch)
    check_positive("context", context, allow_zero=True)
    if dtype != "bf16":
        raise GpuplanError(f"dtype={dtype!r} is invalid for a whole-model decode: it runs in bf16"
                           " (quantized weights and caches: gpuplan serve --weight-dtype)")
    if max_cache_len is not None and max_cache_len < context + 1:
        raise GpuplanError(f"max_cache_len={max_cache_len} is invalid: a static cache must hold "
                           f"the context and the new token ({context + 1} or more)")
    dep = decode_deployment(acc, eff, cfg, stack, cuda_graph=cuda_graph, kv_cache=kv_cache,
                            max_cache_len=max_cache_len, tp=tp)
    step = Batch(decode_seqs=batch, decode_kv_tokens=batch * (context + 1), sampled=batch)
    bd = iteration_breakdown(dep, step)
    memory = decode_memory(cfg, stack, batch=batch, context=context, kv_cache=dep.kv_cache,
                           max_cache_len=max_cache_len, dtype=dtype, tp=tp)
    return dataclasses.replace(bd, memory_bytes=memory)


def decode_memory(cfg, stack, *, batch, context, kv_cache, max_cache_len, dtype, tp=1) -> dict:
    """Peak bytes of a decode step by term (module docstring)."""
    per_layer = kv_bytes_per_token_layer(cfg, stack, dtype)
    held = (max_cache_len or context + 1) if kv_cache == "static" else context + 1
    # each block keeps what its kind keeps (a window, a chunk, a fixed state: ``layer_kinds``)
    per_seq = kv_cache_bytes_per_sequence(cfg, held, dtype, per_token_layer=per_layer)
    # MLA's latent is one head, whole on every rank (``mla_forms``); heads are split by tp
    split = 1 if caches_latent(cfg, stack.name) else tp
    terms = {
        "weights": weight_bytes(cfg, dtype) / tp,
        "kv_cache": batch * per_seq / split,
        "logits": batch * cfg.vocab_size * (dtype_bytes(dtype) + 4),  # and their fp32 upcast
    }
    if kv_cache == "dynamic":  # one block's old and new tensors during its torch.cat
        terms["kv_cache_cat"] = batch * (context + 1) * per_layer / split
    return terms


def prefill_breakdown(
    acc, eff, cfg: ModelConfig, stack: Stack, *, batch: int, seq: int, dtype: str = "bf16",
    tp: int = 1,
) -> Breakdown:
    """One forward of the whole model over ``batch`` prompts of ``seq`` tokens, writing their
    KV cache, with the logits the stack computes; peak memory included."""
    check_positive("batch", batch)
    check_positive("seq", seq)
    eff = queued(eff)
    t = batch * seq
    items: list[Item] = priced_items(embedding_forward(cfg, tokens=t, dtype=dtype), acc, eff,
                                     phase="fwd")
    for layer, count in layer_groups(cfg):
        ops = layer_forward(cfg, batch=batch, seq=seq, dtype=dtype, layer=layer, tp=tp,
                            grouped_experts=stack.moe == "grouped_gemm",
                            moe_glue=stack.moe_glue)
        ops = [*ops, Memory(name="kv_cache_write", op="copy",
                            bytes_moved=2 * t * kv_bytes_per_token_layer(cfg, stack, dtype) / tp,
                            calls=2)]
        ops = transformers_rmsnorm(sliding_window_masked(cfg, stack, ops), stack)
        items += priced_items(_as_run(ops, stack.elementwise), acc, eff, phase="fwd",
                              repeat=count)
    logit_tokens = t if stack.logits == "all" else batch
    final_norm, lm_head = head_forward(cfg, tokens=logit_tokens, dtype=dtype)[:2]
    # the final norm runs over every position: ``logits_to_keep`` slices after it
    head = [*transformers_rmsnorm([dataclasses.replace(final_norm, tokens=t)], stack), lm_head,
            *logit_softcap(cfg, tokens=logit_tokens, dtype=dtype)]
    items += priced_items(_as_run(head, stack.elementwise), acc, eff, phase="fwd")
    bd = _with_launch(items, eff, extra_host_s=_host_extra_s(cfg, stack))
    if stack.host.mode == "compiled" and stack.host.compiled_call_s:
        # a compiled forward's fixed CPU cost before its first kernel (Dynamo's guards, the
        # wrapper's entry), while the GPU waits (``HostModel.compiled_call_s``): the H200's
        # compiled prefills ran 1.0-1.3 ms over their kernels' sum whatever the model and size
        # (data/h200_stacks/run3, run5, run8)
        bd = dataclasses.replace(bd, items=(*bd.items, Item(
            layer="runtime", category="launch", op="compiled call", phase="step",
            time_s=stack.host.compiled_call_s * stack.host.speed_factor, bound="launch")))
    memory = prefill_memory(cfg, stack, batch=batch, seq=seq, dtype=dtype, tp=tp)
    return dataclasses.replace(bd, memory_bytes=memory)


def sliding_window_masked(cfg: ModelConfig, stack: Stack, ops: list) -> list:
    """A windowed block's prefill ops as transformers runs them. ``masking_utils`` may skip the
    mask (SDPA with ``is_causal=True``) only while ``kv_length < sliding_window``
    (``_ignore_causal_mask_sdpa`` with ``local_attention_size``); from ``seq >= sliding_window``
    it materializes the mask, so SDPA gets an arbitrary ``attn_mask`` and no ``is_causal``: the
    kernel computes every one of the ``seq x seq`` scores (no causal skipping), after
    ``repeat_kv`` copies GQA keys and values to every query head (``use_gqa_in_sdpa`` is off
    under a mask: integrations/sdpa_attention.py). The backend stays the phase's default:
    PyTorch's cuDNN path takes a mask (sdp_utils.cpp ``can_use_cudnn_attention``: only
    ``check_attn_mask_shape``, no check against a mask), which is first in Hopper's priority
    order. Observed on the H200 (data/h200_stacks/run2): Mistral-7B (window 4096) at 4096
    tokens ran 1612 kernels against Llama-3-8B's 1441, and its kernel time was 142 ms against
    114 ms priced as causal. Its profile (data/h200_stacks/run7/hf_kernel_profile.json) gives
    the attention kernel 833 us a layer against Llama's causal 266: twice the scores (532 us)
    and 301 us more, the mask read once per query head (32 x 4096^2 x 2 B = 1.07 GB, at 0.75
    of HBM bandwidth: ``hwmodels.efficiency.MEASURED_FRACTION["attn_mask"]``). Only for stacks
    that run transformers' modelling code (``repeat_kv_masked``); elsewhere a window is priced
    as the window it is. A stack that traces the mask (``Stack.traced_causal_mask``: a compiled
    model) takes the same path for every causal prefill attention."""
    if not stack.repeat_kv_masked or stack.attention.prefill == "eager":
        return ops  # transformers' eager attention repeats K/V and adds the mask itself
    out = []
    for op in ops:
        if not _mask_materialized(op, stack):
            out.append(op)
            continue
        if op.heads_kv < op.heads_q:
            kv_bytes = (op.batch * op.seq_kv * op.heads_kv * (op.head_dim + op.v_head_dim)
                        * dtype_bytes(op.dtype))
            rep = op.heads_q / op.heads_kv  # read once, written ``rep`` times (K and V)
            out.append(Memory(name="repeat_kv", op="copy", bytes_moved=kv_bytes * (1 + rep),
                              calls=6))  # per K and V: index with None, expand, reshape
        out.append(dataclasses.replace(op, causal=False, window=0, heads_kv=op.heads_q))
        # the kernel reads the [batch, 1, seq_q, seq_kv] mask once for every query head
        out.append(Memory(name="attention_mask_read", op=ATTN_MASK,
                          bytes_moved=(op.batch * op.heads_q * op.seq_q * op.seq_kv
                                       * dtype_bytes(op.dtype)), calls=0))
    return out


def _mask_materialized(op, stack: Stack) -> bool:
    """Whether transformers passes SDPA an explicit mask for this prefill attention: past a
    sliding window, or for any causal one under a traced mask (``Stack.traced_causal_mask``)."""
    if not isinstance(op, Attention):
        return False
    if op.window and op.seq_kv >= op.window:
        return True
    return stack.traced_causal_mask and op.causal and op.seq_q > 1


def transformers_rmsnorm(ops: list, stack: Stack) -> list:
    """RMSNorms as transformers' eager ``LlamaRMSNorm.forward`` (and Qwen2's, Mistral's,
    Mixtral's, DeepSeek-V2's, the same code) runs them: ``to(float32)``, ``pow(2)``,
    ``mean(-1)``, ``+ eps``, ``rsqrt``, a multiply, ``to(input_dtype)`` and the weight's
    multiply, eight ATen kernels. Per element of a 16-bit input: the cast reads 2 B and writes
    4, the square reads and writes 4 each, the mean reads 4, the multiply reads 4 and writes 4,
    the cast back reads 4 and writes 2, the weight's multiply reads 2 and writes 2: 36 B against
    the 4 B of one fused norm kernel (``EAGER_KERNELS['rmsnorm']``, what the harness's layer
    code runs). The ``+ eps`` and ``rsqrt`` touch one fp32 value per row. Observed: the dense
    HF prefills' kernel times at 4-8k tokens were 6-12% over the priced kernels with a one-
    kernel norm (data/h200_stacks/run2 ``device_kernel_s``), and their kernel counts ~22 per
    block over the priced ones. Eager stacks that run transformers' code only: Inductor fuses
    the norm into one kernel (``torch-compile``).
    The pieces are ``workloads.eager_rmsnorm.eager_rmsnorm``'s, the training step's too
    (``sim.parallel.kernel_lists``, forward and backward): one definition."""
    from gpuplan.sim.parallel.shape import transformers_norm_of

    if not transformers_norm_of(stack):
        return ops
    return with_eager_rmsnorm(ops)[0]


def transformers_rmsnorm_calls(cfg: ModelConfig, stack: Stack) -> int:
    """Torch calls of one step's RMSNorms under ``transformers_rmsnorm`` beyond one per norm
    (the block's two and the final one): a decode prices its norms as one kernel each, and
    their other seven calls cost the CPU as the prefill's do."""
    from gpuplan.sim.parallel.shape import transformers_norm_of

    if not (transformers_norm_of(stack) and cfg.norm == "rmsnorm"):
        return 0
    return (len(rmsnorm_pieces()) - 1) * (2 * cfg.n_layers + 1)


def prefill_memory(cfg, stack, *, batch, seq, dtype, tp=1) -> dict:
    """Peak bytes of a prefill by term: weights, the cache written, one block's live tensors
    (residual stream, normed input, and the MLP's gate, up and activated intermediates at its
    peak) and the logits with their fp32 upcast."""
    t, e = batch * seq, dtype_bytes(dtype)
    width = cfg.d_ff if not cfg.is_moe else max(cfg.d_ff, cfg.d_ff_expert * (cfg.top_k + cfg.n_shared_experts))
    logit_tokens = t if stack.logits == "all" else batch
    return {
        "weights": weight_bytes(cfg, dtype) / tp,
        "kv_cache": batch * kv_cache_bytes_per_sequence(
            cfg, seq, dtype, per_token_layer=kv_bytes_per_token_layer(cfg, stack, dtype)) / tp,
        "activations": t * (2 * cfg.d_model + 3 * width / tp) * e,
        "logits": logit_tokens * cfg.vocab_size * (e + 4),
    }
