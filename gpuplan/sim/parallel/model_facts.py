"""Sizes of a model the closed forms of memory and step time need (``ModelFacts``, computed once
per model): parameters per block kind and end, activation bytes per token, and what op-level
selective checkpointing and an eager fp32 residual stream keep per token.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from gpuplan.workloads.memory import (
    LayerActivations,
    fp8_cached_input_saving,
    layer_activation_bytes,
)
from gpuplan.workloads.model import ModelConfig
from gpuplan.workloads.params import (
    embedding_params,
    ffn_params,
    final_norm_params,
    layer_params,
    lm_head_params,
)

ACT_BYTES = 2  # 16-bit activations


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
    # per token, what fp8 GEMMs under Transformer Engine keep less (``fp8_cached_input_saving``):
    # outside the TP region, inside it; each (dense, moe)
    fp8_rep_saving: tuple[float, float] = (0.0, 0.0)
    fp8_split_saving: tuple[float, float] = (0.0, 0.0)


def _first_blocks(cfg: ModelConfig) -> tuple[int, int | None]:
    """(the first dense block, else block 0; the first MoE block, else None): the blocks whose
    counts stand for every block of their kind."""
    moe_layer = next((i for i in range(cfg.n_layers) if cfg.is_moe_layer(i)), None)
    dense_layer = next((i for i in range(cfg.n_layers) if not cfg.is_moe_layer(i)), 0)
    return dense_layer, moe_layer


def _mean_activations(cfg: ModelConfig, moe: bool) -> LayerActivations | None:
    """The mean saved bytes per token of the blocks with (``moe``) or without an MoE FFN, so
    that count x mean is their sum whatever their mixer kinds (None: no such block)."""
    acts = [layer_activation_bytes(cfg, tokens=1, layer=i) for i in range(cfg.n_layers)
            if cfg.is_moe_layer(i) == moe]
    if not acts:
        return None
    n = len(acts)
    return LayerActivations(sum(a.replicated_bytes for a in acts) / n,
                            sum(a.split_bytes for a in acts) / n)


@functools.cache
def model_facts(cfg: ModelConfig) -> ModelFacts:
    dense_layer, moe_layer = _first_blocks(cfg)
    experts = cfg.n_experts * ffn_params(cfg, cfg.d_ff_expert) if cfg.is_moe else 0
    moe_total = layer_params(cfg, moe_layer) if moe_layer is not None else 0
    moe_or_dense = moe_layer if moe_layer is not None else dense_layer  # block 0 may be MoE
    acts = [layer_activation_bytes(cfg, tokens=1, layer=layer) for layer in (dense_layer, moe_or_dense)]
    if cfg.layer_types or cfg.ffn_types:  # blocks of several kinds: each FFN kind's mean block
        acts = [_mean_activations(cfg, moe) or a for moe, a in zip((False, True), acts, strict=True)]
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
        fp8_rep_saving=tuple(fp8_cached_input_saving(cfg, i)[0] for i in (dense_layer, moe_or_dense)),
        fp8_split_saving=tuple(fp8_cached_input_saving(cfg, i)[1]
                               for i in (dense_layer, moe_or_dense)),  # fmt: skip
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
    - each of the two norms (``workloads.eager_rmsnorm``): its fp32 input (``pow`` and the
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
    swiglu = cfg.activation == "swiglu"  # relu2 (Nemotron-H) has two matrices, as gelu
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
