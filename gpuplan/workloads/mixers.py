"""The token mixer of one block by its kind (``layer_kinds.MIXER_KINDS``), forward.

Attention kinds go through ``attention_block``: full and NoPE (no RoPE) attend to every earlier
key, sliding to its window, chunked within its chunk, and DeepSeek sparse attention (``dsa``) is
MLA over the ``top_k`` keys its lightning indexer selects (priced as MLA over a window of
``top_k`` keys: the same keys per query and the same bytes read) after the indexer itself: its
query, key and weight projections (DeepSeek-V3.2-Exp ``inference/model.py``, ``Indexer``:
``wq_b``, ``wk``, ``weights_proj``) and its fp8 scoring of every earlier key by
``index_n_heads`` heads of ``index_head_dim`` (DeepGEMM's ``fp8_mqa_logits``: one shared key
per token, an attention-like kernel without values). The fixed-state kinds are projections, a
short causal convolution and one chunked scan (``ops.Scan``):

- ``linear`` (Qwen3-Next's ``Qwen3NextGatedDeltaNet``): ``in_proj_qkvz`` (q, k, v and the output
  gate z), ``in_proj_ba`` (beta and the decay a, one each per value head), the depthwise
  convolution over q, k and v, FLA's chunked gated delta rule (chunk 64:
  ``chunk_gated_delta_rule``'s ``BT``), a gated RMSNorm and ``out_proj``;
- ``mamba2`` (HF ``Mamba2Mixer``, Nemotron-H, Granite-4.0-H): ``in_proj`` (z, x, B, C and dt),
  the convolution over x, B and C, the SSD chunked scan, a gated RMSNorm and ``out_proj``.

Tensor parallelism splits the heads (value heads, SSM heads and groups) as vLLM does.
"""

from __future__ import annotations

from gpuplan.workloads.attention_block import attention_block
from gpuplan.workloads.dtypes import dtype_bytes
from gpuplan.workloads.memory import INDEXER_DTYPE
from gpuplan.workloads.model import ModelConfig
from gpuplan.workloads.ops import Attention, Elementwise, Gemm, Memory, Op, Scan

GATED_DELTA_CHUNK = 64  # FLA chunk_gated_delta_rule's chunk (BT = 64)


def mixer_forward(cfg: ModelConfig, layer: int, *, batch: int, seq_q: int, seq_kv: int,
                  dtype: str, tp: int = 1) -> list[Op]:
    """Kernels of block ``layer``'s mixer for ``batch`` sequences of ``seq_q`` new tokens after
    ``seq_kv - seq_q`` cached ones (module docstring)."""
    kind = cfg.layer_kind(layer)
    if kind == "none":
        return []
    if kind in ("linear", "mamba2"):
        build = gated_delta_net if kind == "linear" else mamba2_mixer
        return build(cfg, batch=batch, seq_q=seq_q, dtype=dtype, tp=tp)
    window = {"sliding": cfg.sliding_window,
              "dsa": cfg.sparse_indexer.top_k if cfg.sparse_indexer else 0}.get(kind, 0)
    chunk = cfg.attention_chunk_size if kind == "chunked" else 0
    ops = attention_block(cfg, batch=batch, seq_q=seq_q, seq_kv=seq_kv, dtype=dtype, tp=tp,
                          window=window, chunk=chunk, rope=kind != "nope")
    if kind == "dsa":
        ops = indexer_ops(cfg, batch=batch, seq_q=seq_q, seq_kv=seq_kv, dtype=dtype) + ops
    return ops


def indexer_ops(cfg: ModelConfig, *, batch: int, seq_q: int, seq_kv: int, dtype: str) -> list[Op]:
    """DeepSeek-V3.2's lightning indexer: projections and the fp8 scoring of every earlier key
    (replicated on every rank: it has a single key head)."""
    ix, t = cfg.sparse_indexer, batch * seq_q
    q_in = cfg.q_lora_rank or cfg.d_model  # wq_b reads the compressed query
    return [
        Gemm(name="indexer_wq_b", m=t, n=ix.n_heads * ix.head_dim, k=q_in, dtype=dtype),
        Gemm(name="indexer_wk", m=t, n=ix.head_dim, k=cfg.d_model, dtype=dtype),
        Gemm(name="indexer_weights_proj", m=t, n=ix.n_heads, k=cfg.d_model, dtype=dtype),
        Attention(name="indexer", batch=batch, heads_q=ix.n_heads, heads_kv=1, seq_q=seq_q,
                  seq_kv=seq_kv, head_dim=ix.head_dim, v_head_dim=0, causal=True, pass_="fwd",
                  dtype=INDEXER_DTYPE),
    ]


def _conv(name: str, tokens: int, channels: int, dtype: str) -> Memory:
    """A depthwise causal convolution: each channel read and written once per token."""
    return Memory(name=name, op="copy", bytes_moved=2 * tokens * channels * dtype_bytes(dtype))


def gated_delta_net(cfg: ModelConfig, *, batch: int, seq_q: int, dtype: str,
                    tp: int = 1) -> list[Op]:
    """Qwen3-Next's linear-attention mixer (module docstring)."""
    la, t, h = cfg.linear_attention, batch * seq_q, cfg.d_model
    kh, vh = max(1, la.n_key_heads // tp), max(1, la.n_value_heads // tp)
    key, value = kh * la.key_head_dim, vh * la.value_head_dim
    conv = 2 * key + value
    state = vh * la.key_head_dim * la.value_head_dim + (la.conv_kernel - 1) * conv
    return [
        Gemm(name="in_proj_qkvz", m=t, n=2 * key + 2 * value, k=h, dtype=dtype),
        Gemm(name="in_proj_ba", m=t, n=2 * vh, k=h, dtype=dtype),
        _conv("linear_conv1d", t, conv, dtype),
        Scan(name="gated_delta_rule", kind="linear", batch=batch, seq_q=seq_q, heads=vh,
             key_dim=la.key_head_dim, value_dim=la.value_head_dim, groups=kh,
             chunk=GATED_DELTA_CHUNK, io_per_token=conv + 2 * vh + value, state_elems=state,
             pass_="fwd", dtype=dtype, state_dtype=dtype),
        Elementwise(name="gated_norm", op="rmsnorm", tokens=t, hidden=value, pass_="fwd",
                    dtype=dtype),
        Gemm(name="out_proj", m=t, n=h, k=value, dtype=dtype),
    ]


def mamba2_mixer(cfg: ModelConfig, *, batch: int, seq_q: int, dtype: str,
                 tp: int = 1) -> list[Op]:
    """A Mamba-2 mixer (module docstring)."""
    ssm, t, h = cfg.ssm, batch * seq_q, cfg.d_model
    heads, groups = max(1, ssm.n_heads // tp), max(1, ssm.n_groups // tp)
    inner, bc = heads * ssm.head_dim, 2 * groups * ssm.state_size
    state = heads * ssm.head_dim * ssm.state_size + (ssm.conv_kernel - 1) * (inner + bc)
    return [
        Gemm(name="in_proj", m=t, n=2 * inner + bc + heads, k=h, dtype=dtype),
        _conv("ssm_conv1d", t, inner + bc, dtype),
        Scan(name="ssd_scan", kind="mamba2", batch=batch, seq_q=seq_q, heads=heads,
             key_dim=ssm.state_size, value_dim=ssm.head_dim, groups=groups, chunk=ssm.chunk_size,
             io_per_token=2 * inner + bc + heads, state_elems=state, pass_="fwd", dtype=dtype,
             state_dtype=dtype),
        Elementwise(name="gated_norm", op="rmsnorm", tokens=t, hidden=inner, pass_="fwd",
                    dtype=dtype),
        Gemm(name="out_proj", m=t, n=h, k=inner, dtype=dtype),
    ]
