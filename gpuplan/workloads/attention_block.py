"""The attention half of a transformer block, forward, in the order eager PyTorch runs it: the
query, key and value projections (one fused GEMM, as Megatron-LM and vLLM run MHA, GQA and MQA;
or MLA's low-rank ones, DeepSeek-V2 sec. 2.1), RoPE, the fused (flash) attention kernel and the
output projection; and the append of a decode step's new keys and values to the KV cache.

The structural extras of the Hugging Face families (docs/hf_families.md, "Priced"):
- ``qk_norm``: an RMSNorm of the queries and one of the keys after the projection, before RoPE,
  over each head's ``head_dim`` ("head": Qwen3's and Gemma 3's ``q_norm``/``k_norm`` on the
  ``(..., heads, head_dim)`` view) or over all this rank's heads at once ("all": OLMo 2's, on
  the projection's output) in transformers' modelling code; its backward by ``backward_of``;
- ``attn_output_gate`` (Qwen3-Next's ``Qwen3NextAttention``): ``q_proj`` writes the query and a
  gate of the same width (the fused projection's n grows by ``heads_q * head_dim``), and the
  attention output, laid out for ``o_proj``, is multiplied by ``sigmoid(gate)``;
- ``attention_sinks`` (gpt-oss): one learned logit per head joins each row's softmax inside the
  fused kernel (vLLM's FlashAttention ``s_aux``, FlashInfer's ``sinks``): no kernel of its own;
- ``attn_logit_softcap`` (Gemma 2): ``c tanh(s / c)`` on the scores inside the fused kernel
  (FlashAttention-2's ``softcap`` argument, FlashInfer's ``logits_soft_cap``): no kernel. The
  stacks here never materialize the scores but in SDPA's math backend, and transformers'
  ``sdpa_attention_forward`` passes no soft-cap to SDPA (it has none): none is priced there
  either;
- biases (``attention_bias``, ``qkv_bias``, ``bias``) are added in the GEMM's epilogue
  (cuBLASLt's ``CUBLASLT_EPILOGUE_BIAS``), as ``operators`` assumes for every bias: no kernel.
"""

from __future__ import annotations

from dataclasses import replace

from gpuplan.workloads.dtypes import dtype_bytes
from gpuplan.workloads.memory import indexer_bytes_per_token, kv_cache_bytes_per_token_layer
from gpuplan.workloads.model import ModelConfig
from gpuplan.workloads.ops import QKV_VIEW_CALLS, Attention, Elementwise, Gemm, Memory, Op
from gpuplan.workloads.tensor_parallel import per_rank


def attention_block(
    cfg: ModelConfig,
    *,
    batch: int,
    seq_q: int,
    seq_kv: int,
    dtype: str,
    tp: int = 1,
    causal: bool | None = None,
    window: int = 0,
    chunk: int = 0,
    rope: bool = True,
) -> list[Op]:
    """Projections, RoPE (unless ``rope`` is off: a NoPE layer), fused attention (through a
    sliding ``window`` of keys, or within chunks of ``chunk`` keys, when > 0) and output
    projection of one block (forward)."""
    t, h = batch * seq_q, cfg.d_model
    hq, hkv = per_rank(cfg.n_heads, tp, "n_heads"), max(1, cfg.n_kv_heads // tp)
    dqk, dv = cfg.qk_head_dim, cfg.v_dim_per_head
    if cfg.is_mla:
        ops = _mla_projections(cfg, tokens=t, heads_q=hq, dtype=dtype)
    else:
        ops = _qkv_projection(cfg, tokens=t, heads_q=hq, heads_kv=hkv, dtype=dtype)
        ops += _qk_norms(cfg, tokens=t, heads_q=hq, heads_kv=hkv, dtype=dtype)
    if cfg.position == "rope" and rope:
        ops += _rope(cfg, tokens=t, heads_q=hq, heads_kv=hkv, dtype=dtype)
    ops += [
        Attention(
            name="attention",
            batch=batch,
            heads_q=hq,
            heads_kv=hkv,
            seq_q=seq_q,
            seq_kv=seq_kv,
            head_dim=dqk,
            v_head_dim=dv,
            causal=cfg.causal if causal is None else causal,
            pass_="fwd",
            dtype=dtype,
            window=window,
            chunk=chunk,
            sinks=cfg.attention_sinks,
        ),
        Elementwise(
            name="attn_out_layout", op="copy", tokens=t, hidden=hq * dv, pass_="fwd", dtype=dtype
        ),  # (b, h, s, d) -> (b, s, h*d) made contiguous for o_proj
    ]
    if cfg.attn_output_gate:  # attn_output * torch.sigmoid(gate)
        ops.append(Elementwise(name="attn_output_gate", op="sigmoid_mul", tokens=t,
                               hidden=hq * dv, pass_="fwd", dtype=dtype))
    ops.append(Gemm(name="o_proj", m=t, n=h, k=hq * dv, dtype=dtype))
    return ops


def _qkv_projection(cfg: ModelConfig, *, tokens: int, heads_q: int, heads_kv: int,
                    dtype: str) -> list[Op]:
    """One fused q, k, v projection (as Megatron-LM and vLLM run it) and the views that split it."""
    dqk, dv = cfg.qk_head_dim, cfg.v_dim_per_head
    gate = heads_q * dqk if cfg.attn_output_gate else 0  # q_proj's second half: the gate
    n = heads_q * dqk + gate + heads_kv * (dqk + dv)
    return [
        Gemm(name="qkv_proj", m=tokens, n=n, k=cfg.d_model, dtype=dtype),
        # views only: no kernel, but a CPU dispatch each in eager PyTorch
        Memory(name="qkv_views", op="view", bytes_moved=0, calls=QKV_VIEW_CALLS),
    ]


def _qk_norms(cfg: ModelConfig, *, tokens: int, heads_q: int, heads_kv: int,
              dtype: str) -> list[Op]:
    """The q and k RMSNorms of ``qk_norm`` (module docstring): a row per head and token over
    ``head_dim`` ("head"), or a row per token over every head of this rank ("all")."""
    if not cfg.qk_norm:
        return []
    d = cfg.qk_head_dim
    per_head = cfg.qk_norm == "head"
    return [
        Elementwise(name=f"{which}_norm", op="rmsnorm",
                    tokens=tokens * heads if per_head else tokens,
                    hidden=d if per_head else heads * d, pass_="fwd", dtype=dtype)
        for which, heads in (("q", heads_q), ("k", heads_kv))
    ]


def _mla_projections(cfg: ModelConfig, *, tokens: int, heads_q: int, dtype: str) -> list[Op]:
    """MLA's low-rank query and joint key-value compression (DeepSeek-V2 sec. 2.1)."""
    t, h = tokens, cfg.d_model
    dqk = cfg.qk_head_dim
    ops: list[Op] = []
    if cfg.q_lora_rank:
        ops += [
            Gemm(name="q_a_proj", m=t, n=cfg.q_lora_rank, k=h, dtype=dtype),
            Gemm(name="q_b_proj", m=t, n=heads_q * dqk, k=cfg.q_lora_rank, dtype=dtype),
        ]
    else:
        ops.append(Gemm(name="q_proj", m=t, n=heads_q * dqk, k=h, dtype=dtype))
    ops += [
        Gemm(name="kv_a_proj", m=t, n=cfg.kv_lora_rank + cfg.qk_rope_head_dim, k=h, dtype=dtype),
        mla_expand(cfg, tokens=t, heads_q=heads_q, dtype=dtype),
    ]
    return ops


def _rope(cfg: ModelConfig, *, tokens: int, heads_q: int, heads_kv: int, dtype: str) -> list[Op]:
    """Rotary position embedding of the queries and the keys (MLA: the keys' RoPE part only)."""
    dqk = cfg.qk_head_dim
    rope_k = heads_kv * (cfg.qk_rope_head_dim if cfg.is_mla else dqk)
    return [
        Elementwise(
            name="rope_q", op="rope", tokens=tokens, hidden=heads_q * dqk, pass_="fwd", dtype=dtype
        ),
        Elementwise(
            name="rope_k", op="rope", tokens=tokens, hidden=rope_k, pass_="fwd", dtype=dtype
        ),
    ]


def kv_cache_append(cfg: ModelConfig, *, tokens: int, dtype: str, tp: int = 1,
                    indexer: bool = False, latent: bool | None = None) -> Memory:
    """Writing the new tokens' keys and values into the cache (read once, written once); with
    ``indexer``, a DeepSeek sparse-attention block's indexer keys too. MLA's latent (``latent``,
    by default for MLA) is one head, whole on every tensor-parallel rank; without it (a cache of
    decompressed heads, as Hugging Face keeps) each rank writes its heads' keys and values."""
    latent = cfg.is_mla if latent is None else latent
    if latent:
        per_token = kv_cache_bytes_per_token_layer(cfg, dtype)
    else:
        heads = cfg.n_heads if cfg.is_mla else cfg.n_kv_heads
        per_token = heads * (cfg.qk_head_dim + cfg.v_dim_per_head) * dtype_bytes(dtype) / tp
    if indexer:
        per_token += indexer_bytes_per_token(cfg)
    return Memory(name="kv_cache_append", op="copy", bytes_moved=2 * tokens * per_token, calls=6)


# --- MLA decoded in its absorbed form ---------------------------------------------------------
#
# Serving engines decode MLA against the cached latent, never expanding it (DeepSeek-V2 sec.
# 2.1.3, "absorb W^UK into W^Q and W^UV into W^O"; vLLM vllm/v1/attention/backends/mla/common.py,
# "the data-movement friendly approach for decode": ``_forward_decode`` multiplies ``q_nope`` by
# ``W_UK_T`` and the attention output by ``W_UV`` with ``torch.bmm``; SGLang
# python/sglang/srt/models/deepseek_v2.py ``forward_absorb``: ``w_kc``, ``w_vc``; DeepSeek-V3's
# own inference/model.py ``attn_impl = "absorb"``). Per query head, for a cache of c + r
# elements a token (kv_lora_rank 512 + qk_rope_head_dim 64 in DeepSeek-V3):
#   q_nope (t, h, 128) x W_UK (h, 128, 512)  -> q_latent (t, h, 512)    bmm over h heads
#   [q_latent, q_pe] (t, h, 576) . latent (s, 576)  -> scores; p . latent[:, :512] -> (t, h, 512)
#   out (t, h, 512) x W_UV (h, 512, 128)     -> (t, h, 128)             bmm over h heads
# The kernel (FlashMLA, FlashInfer MLA, TRT-LLM's MLA generation kernel) reads the 576-element
# latent once per token for all heads: one shared key-value head. vLLM keeps W_UK and W_UV in 16
# bits whatever the checkpoint's format ("we currently do not have quantized bmm's ... store
# fp16/bf16 copies", ``process_weights_after_loading``). Prefill stays in the expanded form
# (``kv_b_proj`` over the new and the cached tokens, then ordinary attention), as the engines
# run it: it is compute-bound, and the expanded form does fewer FLOPs.
MLA_ABSORB_GEMMS = ("mla_w_uk", "mla_w_uv")


def mla_latent_attention(cfg: ModelConfig, att: Attention) -> Attention:
    """``att`` (an MLA block's attention as ``attention_block`` writes it) over the cached
    latent: one key-value head of ``kv_lora_rank + qk_rope_head_dim`` elements whose first
    ``kv_lora_rank`` are the value (``Attention.shared_kv``)."""
    return replace(att, heads_kv=1, head_dim=cfg.kv_lora_rank + cfg.qk_rope_head_dim,
                   v_head_dim=cfg.kv_lora_rank, shared_kv=True)


def mla_absorb_gemms(cfg: ModelConfig, *, tokens: int, heads_q: int, dtype: str) -> list[Op]:
    """The absorbed up-projections of ``tokens`` decode tokens on a rank of ``heads_q`` heads:
    W_UK into the query and W_UV out of the attention, one batched GEMM (bmm) each."""
    return [
        Gemm(name="mla_w_uk", m=tokens, n=cfg.kv_lora_rank, k=cfg.qk_nope_head_dim, dtype=dtype,
             count=heads_q, launches=1),
        Gemm(name="mla_w_uv", m=tokens, n=cfg.v_head_dim, k=cfg.kv_lora_rank, dtype=dtype,
             count=heads_q, launches=1),
    ]


def mla_expand(cfg: ModelConfig, *, tokens: int, heads_q: int, dtype: str) -> Gemm:
    """``kv_b_proj``: the latent of ``tokens`` tokens expanded to this rank's per-head keys
    (no-RoPE part) and values, as a prefill runs it."""
    return Gemm(name="kv_b_proj", m=tokens, n=heads_q * (cfg.qk_nope_head_dim + cfg.v_head_dim),
                k=cfg.kv_lora_rank, dtype=dtype)
