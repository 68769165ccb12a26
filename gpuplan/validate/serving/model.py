"""The served model: Llama-like with random weights, and its preallocated KV cache.

The model is the decoder layer of the measurement contract (RMSNorm, one fused q/k/v GEMM,
rotate-half RoPE, SDPA, SwiGLU with a fused gate/up GEMM) with an embedding, a final norm and an
untied LM head; greedy sampling. Shapes default to Llama-2-7B.

The KV cache is preallocated: ``max_seqs`` slots of ``max_len`` positions for every layer, one
tensor for keys and one for values ([layers, slots, kv heads, positions, head dim]). Running
sequences occupy slots 0..B-1; when one finishes, the last running sequence's cache moves into
its slot (one copy), so a decode step reads a contiguous block of slots.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

ROPE_BASE = 10_000.0  # Llama 2 (only the values of cos/sin depend on it)
LLAMA2_7B = {"hidden": 4096, "heads_q": 32, "heads_kv": 32, "ffn": 11008, "layers": 32,
             "vocab": 32000}  # fmt: skip
TINY = {"hidden": 64, "heads_q": 4, "heads_kv": 2, "ffn": 128, "layers": 2, "vocab": 128}


def rope_tables(positions: int, head_dim: int, *, device, dtype):
    """cos and sin [positions, head_dim] (rotate-half form, Su et al. 2021, eq. 34)."""
    inv = 1.0 / ROPE_BASE ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim)
    freqs = torch.outer(torch.arange(positions, device=device).float(), inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


class Layer(nn.Module):
    """One decoder layer; the cache tensors are views of this layer's slice."""

    def __init__(self, hidden: int, heads_q: int, heads_kv: int, ffn: int):
        super().__init__()
        self.hidden, self.hq, self.hkv = hidden, heads_q, heads_kv
        self.d = hidden // heads_q
        self.attn_norm = nn.Parameter(torch.ones(hidden))
        self.wqkv = nn.Linear(hidden, (heads_q + 2 * heads_kv) * self.d, bias=False)
        self.wo = nn.Linear(hidden, hidden, bias=False)
        self.mlp_norm = nn.Parameter(torch.ones(hidden))
        self.w_gate_up = nn.Linear(hidden, 2 * ffn, bias=False)
        self.w_down = nn.Linear(ffn, hidden, bias=False)

    def _qkv(self, x, cos, sin):
        b, s, _ = x.shape
        h = F.rms_norm(x, (self.hidden,), self.attn_norm, 1e-5)
        q, k, v = self.wqkv(h).split([self.hq * self.d, self.hkv * self.d, self.hkv * self.d], -1)
        q = q.view(b, s, self.hq, self.d).transpose(1, 2)  # (B, hq, S, D)
        k = k.view(b, s, self.hkv, self.d).transpose(1, 2)  # (B, hkv, S, D)
        v = v.view(b, s, self.hkv, self.d).transpose(1, 2)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def _out_and_mlp(self, x, o):
        b, s, _ = x.shape
        x = x + self.wo(o.transpose(1, 2).reshape(b, s, self.hidden))
        h = F.rms_norm(x, (self.hidden,), self.mlp_norm, 1e-5)
        gate, up = self.w_gate_up(h).chunk(2, dim=-1)
        return x + self.w_down(F.silu(gate) * up)

    def prefill(self, x, cos, sin, k_cache, v_cache, slots):
        """x [k, P, hidden] of k new prompts going into cache ``slots``."""
        q, k, v = self._qkv(x, cos, sin)
        p = x.shape[1]
        k_cache[slots, :, :p] = k
        v_cache[slots, :, :p] = v
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.hq != self.hkv)
        return self._out_and_mlp(x, o)

    def decode(self, x, cos, sin, k_cache, v_cache, rows, positions, span, mask):
        """x [B, 1, hidden] at ``positions``; the sequences are in slots 0..B-1."""
        q, k, v = self._qkv(x, cos, sin)
        k_cache[rows, :, positions] = k[:, :, 0]
        v_cache[rows, :, positions] = v[:, :, 0]
        b = x.shape[0]
        keys, values = k_cache[:b, :, :span], v_cache[:b, :, :span]
        o = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask,
                                           enable_gqa=self.hq != self.hkv)  # fmt: skip
        return self._out_and_mlp(x, o)


class Model(nn.Module):
    """Embedding, decoder layers, final norm, untied LM head, and the preallocated cache."""

    def __init__(self, shape: dict, *, max_seqs: int, max_len: int, device, dtype):
        super().__init__()
        hidden, vocab = shape["hidden"], shape["vocab"]
        with torch.device(device):
            self.embed = nn.Embedding(vocab, hidden)
            self.layers = nn.ModuleList(
                Layer(hidden, shape["heads_q"], shape["heads_kv"], shape["ffn"])
                for _ in range(shape["layers"])
            )
            self.norm = nn.Parameter(torch.ones(hidden))
            self.head = nn.Linear(hidden, vocab, bias=False)
        self.to(dtype)
        for p in self.parameters():  # random weights, small enough to stay finite
            nn.init.normal_(p, std=0.02) if p.dim() > 1 else nn.init.ones_(p)
        d = hidden // shape["heads_q"]
        cache = (shape["layers"], max_seqs, shape["heads_kv"], max_len, d)
        self.k_cache = torch.zeros(cache, device=device, dtype=dtype)
        self.v_cache = torch.zeros(cache, device=device, dtype=dtype)
        self.cos, self.sin = rope_tables(max_len, d, device=device, dtype=dtype)
        self.hidden = hidden
        # With a mask, PyTorch runs decode attention on its memory-efficient kernel; without
        # one, on the flash kernel, reading the whole span for every row (the positions past a
        # sequence's own hold stale cache entries: harmless for timing with random weights).
        self.mask_decode = True

    def _sample(self, x):
        h = F.rms_norm(x, (self.hidden,), self.norm, 1e-5)
        return self.head(h).argmax(dim=-1)

    def prefill(self, tokens, slots):
        """tokens [k, P] into cache ``slots`` [k]; the first generated token of each [k]."""
        p = tokens.shape[1]
        x = self.embed(tokens)
        cos, sin = self.cos[:p], self.sin[:p]
        for i, layer in enumerate(self.layers):
            x = layer.prefill(x, cos, sin, self.k_cache[i], self.v_cache[i], slots)
        return self._sample(x[:, -1])

    def decode(self, tokens, positions, span: int):
        """tokens [B] of the sequences in slots 0..B-1, at ``positions`` [B]; next tokens [B]."""
        b = tokens.shape[0]
        x = self.embed(tokens)[:, None]
        cos, sin = self.cos[positions][:, None, None], self.sin[positions][:, None, None]
        rows = torch.arange(b, device=tokens.device)
        keys = torch.arange(span, device=tokens.device)
        mask = (keys[None] <= positions[:, None])[:, None, None]  # (B, 1, 1, span)
        if not self.mask_decode:  # timing only: every row reads the whole span, flash kernel
            mask = None
        for i, layer in enumerate(self.layers):
            x = layer.decode(x, cos, sin, self.k_cache[i], self.v_cache[i], rows, positions,
                             span, mask)  # fmt: skip
        return self._sample(x[:, 0])

    def move_slot(self, src: int, dst: int, length: int) -> None:
        self.k_cache[:, dst, :, :length] = self.k_cache[:, src, :, :length]
        self.v_cache[:, dst, :, :length] = self.v_cache[:, src, :, :length]
