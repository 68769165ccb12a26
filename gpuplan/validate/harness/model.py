"""The Llama-style decoder layer of the measurement contract, and the stacks built from it.

One layer (Touvron et al. 2023, "Llama 2", section 2.2; the Hugging Face ``LlamaDecoderLayer``):

    x = x + Wo · SDPA(RoPE(Wq·h), RoPE(Wk·h), Wv·h, causal),   h = RMSNorm(x)
    x = x + Wdown · (silu(Wgate·h) * (Wup·h)),                h = RMSNorm(x)

with grouped-query attention (``heads_kv`` key/value heads shared by ``heads_q / heads_kv`` query
heads) and no biases. Choices that change what the kernels see, stated once here:

- q, k, v come from ONE fused GEMM ``wqkv`` [(heads_q + 2 heads_kv) * head_dim, hidden], and gate
  and up from one fused GEMM ``w_gate_up`` [2 ffn, hidden], as Megatron-LM fuses them; the
  output and down projections are single GEMMs. So a layer runs four GEMMs forward.
- RMSNorm is ``torch.nn.functional.rms_norm``; RoPE is the rotate-half form on cos/sin tables
  (Su et al. 2021, RoFormer, eq. 34), computed with plain tensor ops (several small kernels in
  eager mode); attention is ``scaled_dot_product_attention`` with ``enable_gqa`` (the flash
  backend on Hopper), on [batch, heads, seq, head_dim] views.
- SwiGLU (Shazeer 2020, "GLU variants improve transformer", eq. 6) as ``silu(gate) * up``.

The training stack adds an embedding, a final RMSNorm, an untied LM head and cross-entropy.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

# Layer shapes the campaign measures: (hidden, heads_q, heads_kv, ffn)
CONFIGS = {
    "llama3-8b": (4096, 32, 8, 14336),
    "llama2-7b": (4096, 32, 32, 11008),
    "small": (2048, 16, 16, 5632),
    "big": (8192, 64, 8, 28672),
}
ROPE_BASE = 500_000.0  # Llama 3 (config "rope_theta"); only the values of cos/sin depend on it


def rope_tables(seq: int, head_dim: int, *, start: int = 0, device=None, dtype=None):
    """cos and sin tables [seq, head_dim] for positions start..start+seq-1 (rotate-half form)."""
    inv_freq = 1.0 / ROPE_BASE ** (
        torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim
    )
    pos = torch.arange(start, start + seq, device=device, dtype=torch.float32)
    freqs = torch.outer(pos, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)  # (S, D)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x, cos, sin):
    """Rotate x [B, heads, S, D] by the position tables cos/sin [S, D]."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


class DecoderLayer(nn.Module):
    """RMSNorm, GQA attention with RoPE, RMSNorm, SwiGLU MLP; pre-norm residuals, no biases."""

    def __init__(self, hidden: int, heads_q: int, heads_kv: int, ffn: int, eps: float = 1e-5):
        super().__init__()
        if hidden % heads_q or heads_q % heads_kv:
            raise ValueError(
                f"hidden={hidden}, heads_q={heads_q}, heads_kv={heads_kv}: hidden must be a "
                "multiple of heads_q and heads_q a multiple of heads_kv"
            )
        self.hidden, self.heads_q, self.heads_kv, self.eps = hidden, heads_q, heads_kv, eps
        self.head_dim = hidden // heads_q
        qkv_out = (heads_q + 2 * heads_kv) * self.head_dim
        self.attn_norm = nn.Parameter(torch.ones(hidden))
        self.wqkv = nn.Linear(hidden, qkv_out, bias=False)
        self.wo = nn.Linear(heads_q * self.head_dim, hidden, bias=False)
        self.mlp_norm = nn.Parameter(torch.ones(hidden))
        self.w_gate_up = nn.Linear(hidden, 2 * ffn, bias=False)
        self.w_down = nn.Linear(ffn, hidden, bias=False)

    def _qkv(self, x, cos, sin):
        b, s, _ = x.shape
        d = self.head_dim
        h = F.rms_norm(x, (self.hidden,), self.attn_norm, self.eps)
        q, k, v = self.wqkv(h).split([self.heads_q * d, self.heads_kv * d, self.heads_kv * d], -1)
        q = q.view(b, s, self.heads_q, d).transpose(1, 2)  # (B, hq, S, D)
        k = k.view(b, s, self.heads_kv, d).transpose(1, 2)  # (B, hkv, S, D)
        v = v.view(b, s, self.heads_kv, d).transpose(1, 2)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def _attend_and_mlp(self, x, q, k, v, causal: bool):
        b, s, _ = x.shape
        gqa = self.heads_q != self.heads_kv
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
        x = x + self.wo(o.transpose(1, 2).reshape(b, s, self.heads_q * self.head_dim))
        h = F.rms_norm(x, (self.hidden,), self.mlp_norm, self.eps)
        gate, up = self.w_gate_up(h).chunk(2, dim=-1)
        return x + self.w_down(F.silu(gate) * up)

    def forward(self, x, cos, sin):
        """x [B, S, hidden] -> [B, S, hidden]; causal self-attention over the S positions."""
        q, k, v = self._qkv(x, cos, sin)
        return self._attend_and_mlp(x, q, k, v, causal=True)

    def decode(self, x, cos, sin, k_cache, v_cache, pos: int):
        """One new token x [B, 1, hidden] at position ``pos``; caches [B, hkv, max_ctx, D]."""
        q, k, v = self._qkv(x, cos, sin)
        k_cache[:, :, pos] = k[:, :, 0]
        v_cache[:, :, pos] = v[:, :, 0]
        keys, values = k_cache[:, :, : pos + 1], v_cache[:, :, : pos + 1]
        return self._attend_and_mlp(x, q, keys, values, causal=False)


class TrainModel(nn.Module):
    """Embedding, ``layers`` decoder layers, final RMSNorm, untied LM head, cross-entropy."""

    def __init__(self, *, vocab, hidden, heads_q, heads_kv, ffn, layers, recompute: str):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(
            DecoderLayer(hidden, heads_q, heads_kv, ffn) for _ in range(layers)
        )
        self.norm = nn.Parameter(torch.ones(hidden))
        self.head = nn.Linear(hidden, vocab, bias=False)
        self.recompute = recompute

    def forward(self, tokens, targets, cos, sin):
        """Mean cross-entropy of next-token logits; tokens and targets [B, S] int64."""
        x = self.embed(tokens)
        for layer in self.layers:
            if self.recompute == "full":
                x = checkpoint(layer, x, cos, sin, use_reentrant=False)
            else:
                x = layer(x, cos, sin)
        x = F.rms_norm(x, (x.shape[-1],), self.norm, 1e-5)
        logits = self.head(x)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
