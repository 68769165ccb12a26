"""The two forms a serving engine runs MLA in (DeepSeek-V2/V3, Kimi-K2, DeepSeek-V3.2's sparse
attention): decode absorbed, against the cached latent, prefill expanded
(``workloads.attention_block``, "MLA decoded in its absorbed form", for the shapes and sources).

An engine that caches the latent (vLLM, SGLang, TensorRT-LLM, DeepSeek's own inference code; every
stack here but ``hf-transformers``, whose modelling code caches the decompressed heads) runs:

- the token part of an iteration without ``kv_b_proj``: its decode tokens never expand the latent;
- each decode: W_UK's bmm over the decode tokens, one attention kernel over the latent (576
  elements a cached token per block, read once for all the rank's heads, whole on every
  tensor-parallel rank: the latent is one head) and W_UV's bmm;
- each prefill piece: ``kv_b_proj`` over its new tokens and the tokens it had cached (vLLM's
  ``_forward_prefill`` expands the new tokens' latent and ``_compute_prefill_context`` gathers and
  expands the cached context's), then the expanded per-head attention.
"""

from __future__ import annotations

from gpuplan.workloads.attention_block import (
    mla_absorb_gemms,
    mla_expand,
    mla_latent_attention,
)
from gpuplan.workloads.dtypes import dtype_bytes
from gpuplan.workloads.memory import kv_cache_bytes_per_token_layer
from gpuplan.workloads.ops import Attention, Op

EXPANDED_CACHE_STACKS = ("hf-transformers",)  # cache the decompressed per-head keys and values


def caches_latent(cfg, stack: str) -> bool:
    """Whether ``stack`` keeps an MLA model's cache as the latent (and so decodes absorbed)."""
    return cfg.is_mla and stack not in EXPANDED_CACHE_STACKS


def without_expansion(dep, ops: list[Op]) -> list[Op]:
    """A block's token-part kernels less ``kv_b_proj`` where decode is absorbed (the prefill
    pieces expand their own tokens: ``expanded_prefill``)."""
    if not caches_latent(dep.model, dep.stack):
        return ops
    return [op for op in ops if op.name != "kv_b_proj"]


def _is_mla_attention(dep, att) -> bool:
    return (isinstance(att, Attention) and att.name in ("decode_attention", "prefill_attention")
            and caches_latent(dep.model, dep.stack))


def absorbed_decode(dep, dec) -> list[Op]:
    """A decode attention kernel (``iteration.decode_attention``) as the deployment runs it: for
    a latent cache, W_UK's bmm, the attention over the latent, W_UV's bmm."""
    if not _is_mla_attention(dep, dec):
        return [dec]
    w_uk, w_uv = mla_absorb_gemms(dep.model, tokens=dec.batch, heads_q=dec.heads_q,
                                  dtype=dep.act_dtype)
    return [w_uk, mla_latent_attention(dep.model, dec), w_uv]


def expanded_prefill(dep, pre, *, tokens: int, cached: int, seqs: int) -> list[Op]:
    """A prefill piece's attention (``iteration.prefill_attention``) as the deployment runs it:
    for a latent cache, ``kv_b_proj`` over the piece's new and cached tokens first."""
    if not _is_mla_attention(dep, pre):
        return [pre]
    expand = mla_expand(dep.model, tokens=(tokens + cached) * seqs, heads_q=pre.heads_q,
                        dtype=dep.act_dtype)
    return [expand, pre]


def cache_bytes_per_token_layer(cfg, stack: str, dtype: str) -> float:
    """KV-cache bytes of one token in one block as ``stack`` stores them: Hugging Face's MLA
    modelling code (DeepSeek-V2/V3) caches the decompressed per-head keys and values, not the
    latent; every other stack the model's own layout (``workloads.memory``)."""
    if cfg.is_mla and not caches_latent(cfg, stack):
        return cfg.n_heads * (cfg.qk_head_dim + cfg.v_dim_per_head) * dtype_bytes(dtype)
    return kv_cache_bytes_per_token_layer(cfg, dtype)


def cache_bytes_per_token_rank(dep) -> float:
    """``cache_bytes_per_token_layer`` on one tensor-parallel rank: its share of the heads, or
    MLA's latent whole (one head, on every rank)."""
    per = cache_bytes_per_token_layer(dep.model, dep.stack, dep.kv_dtype)
    return per if caches_latent(dep.model, dep.stack) else per / dep.tp
