"""The contract's Llama-style decoder layer under Megatron tensor parallelism (Shoeybi et al.
2019, Megatron-LM, section 3, fig. 3 and 4).

Each of ``tp`` ranks holds the column-parallel slices of the fused qkv weight
[(heads_q + 2 heads_kv) / tp * head_dim, hidden] and of the fused gate+up weight
[2 ffn / tp, hidden], and the row-parallel slices of the output projection
[hidden, heads_q / tp * head_dim] and of the down projection [hidden, ffn / tp]; the two RMSNorm
weights are replicated. With "f" (identity forward, all-reduce of the gradient backward) before
each column-parallel GEMM and "g" (all-reduce forward, identity backward) after each row-parallel
one (Megatron's conjugate pair, fig. 3):

    h = f(RMSNorm(x));  q, k, v = RoPE(Wqkv_r h);  x = x + g(Wo_r SDPA(q, k, v, causal))
    h = f(RMSNorm(x));  x = x + g(Wdown_r (silu(Wgate_r h) * (Wup_r h)))

so a forward runs two all-reduces of [tokens, hidden] and a backward two more. Everything else is
``model.DecoderLayer``'s: fused GEMMs, rotate-half RoPE with plain tensor ops, SDPA causal with
GQA (``heads_kv / tp`` key/value heads per rank, so ``heads_kv`` must be a multiple of ``tp``),
no biases, bf16 weights and activations; with tp = 1 the layer runs exactly DecoderLayer's
kernels and no communication.

``fwd`` times a forward with grad enabled; ``fwd_bwd`` adds ``torch.autograd.grad`` of the output
(random gradient) for the input and every weight. ``time_s`` is the median over repetitions of
the slowest rank's time (distributed.time_ranks: ranks aligned by a one-element all-reduce, no
GPU spin, so torch's launch overhead is in it where the CPU sets the pace, as in an eager
training step); ``stats.fastest_rank_median_s`` holds the other statistic. tp = 1 cases run on
the same machine, each rank its own full layer at the same time, the slowest rank recorded.
"""

from __future__ import annotations

import random

import torch
import torch.nn.functional as F
from torch import nn

from . import distributed
from .model import CONFIGS, apply_rope, rope_tables
from .tp_mlp import _ReduceBackward, _ReduceForward

_SHAPES = ("llama3-8b", "llama2-7b", "small", "big")
_SEQ_MB = ((2048, 1), (4096, 1), (8192, 1), (4096, 2))
_MAX_TOKENS = {"big": 8192}
_TINY = (64, 4, 2, 128)


class TPDecoderLayer(nn.Module):
    """One rank's slice of a tensor-parallel decoder layer (the module docstring)."""

    def __init__(
        self, hidden: int, heads_q: int, heads_kv: int, ffn: int, tp: int, eps: float = 1e-5
    ):
        super().__init__()
        _check_shape(hidden, heads_q, heads_kv, ffn, tp)
        self.hidden, self.tp, self.eps = hidden, tp, eps
        self.head_dim = hidden // heads_q
        self.heads_q, self.heads_kv = heads_q // tp, heads_kv // tp  # this rank's heads
        d = self.head_dim
        self.attn_norm = nn.Parameter(torch.ones(hidden))
        self.wqkv = nn.Linear(hidden, (self.heads_q + 2 * self.heads_kv) * d, bias=False)
        self.wo = nn.Linear(self.heads_q * d, hidden, bias=False)
        self.mlp_norm = nn.Parameter(torch.ones(hidden))
        self.w_gate_up = nn.Linear(hidden, 2 * ffn // tp, bias=False)
        self.w_down = nn.Linear(ffn // tp, hidden, bias=False)

    def _f(self, h):
        return _ReduceBackward.apply(h) if self.tp > 1 else h

    def _g(self, y):
        return _ReduceForward.apply(y) if self.tp > 1 else y

    def forward(self, x, cos, sin):
        """x [B, S, hidden] replicated on every rank -> [B, S, hidden], the same on every rank."""
        b, s, _ = x.shape
        d, hq, hkv = self.head_dim, self.heads_q, self.heads_kv
        h = self._f(F.rms_norm(x, (self.hidden,), self.attn_norm, self.eps))
        q, k, v = self.wqkv(h).split([hq * d, hkv * d, hkv * d], -1)
        q = apply_rope(q.view(b, s, hq, d).transpose(1, 2), cos, sin)  # (B, hq, S, D)
        k = apply_rope(k.view(b, s, hkv, d).transpose(1, 2), cos, sin)  # (B, hkv, S, D)
        v = v.view(b, s, hkv, d).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=hq != hkv)
        x = x + self._g(self.wo(o.transpose(1, 2).reshape(b, s, hq * d)))
        h = self._f(F.rms_norm(x, (self.hidden,), self.mlp_norm, self.eps))
        gate, up = self.w_gate_up(h).chunk(2, dim=-1)
        return x + self._g(self.w_down(F.silu(gate) * up))


@torch.no_grad()
def shard(full, rank: int, tp: int) -> TPDecoderLayer:
    """Rank ``rank``'s slice of a whole ``model.DecoderLayer`` (same dtype and device): the
    rank's query heads with their key/value heads, its share of the FFN width."""
    d, hq, hkv = full.head_dim, full.heads_q, full.heads_kv
    ffn = full.w_down.in_features
    dev, dtype = full.wqkv.weight.device, full.wqkv.weight.dtype
    with torch.device(dev):
        part = TPDecoderLayer(full.hidden, hq, hkv, ffn, tp, full.eps).to(dtype)

    def rows(w, start: int, width: int, n_parts: int):
        return w[start + rank * width // n_parts : start + (rank + 1) * width // n_parts]

    q, kv, f = hq * d, hkv * d, ffn
    wqkv = full.wqkv.weight
    part.wqkv.weight.copy_(
        torch.cat([rows(wqkv, 0, q, tp), rows(wqkv, q, kv, tp), rows(wqkv, q + kv, kv, tp)])
    )
    part.wo.weight.copy_(rows(full.wo.weight.T, 0, q, tp).T)
    gu = full.w_gate_up.weight
    part.w_gate_up.weight.copy_(torch.cat([rows(gu, 0, f, tp), rows(gu, f, f, tp)]))
    part.w_down.weight.copy_(rows(full.w_down.weight.T, 0, f, tp).T)
    part.attn_norm.copy_(full.attn_norm)
    part.mlp_norm.copy_(full.mlp_norm)
    return part


def _check_shape(hidden: int, heads_q: int, heads_kv: int, ffn: int, tp: int) -> None:
    if hidden % heads_q or heads_q % heads_kv or heads_kv % tp or ffn % tp:
        raise ValueError(
            f"hidden={hidden}, heads_q={heads_q}, heads_kv={heads_kv}, ffn={ffn}, tp={tp}: "
            "hidden must be a multiple of heads_q, heads_q of heads_kv, and heads_kv and ffn "
            "multiples of tp"
        )


def _case(cfg, seq, mb, tp, pass_) -> dict:
    hidden, hq, hkv, ffn = cfg
    return {
        "hidden": hidden,
        "heads_q": hq,
        "heads_kv": hkv,
        "ffn": ffn,
        "seq": seq,
        "micro_batch": mb,
        "tp": tp,
        "pass": pass_,
        "dtype": "bf16",
    }


def cases(tiny: bool, device: str, world: int) -> list[dict]:
    """tp = world and tp = 1 for every shape, (seq, micro-batch) and pass; tp pairs together.

    Shapes whose key/value heads do not split over ``world`` ranks are left out.
    """
    tps = sorted({1, world}, reverse=True)
    if tiny:
        return [_case(_TINY, 16, 2, tp, p) for p in ("fwd", "fwd_bwd") for tp in tps]
    shapes = [
        (CONFIGS[name], s, mb, p)
        for name in _SHAPES
        if CONFIGS[name][2] % world == 0
        for s, mb in _SEQ_MB
        if s * mb <= _MAX_TOKENS.get(name, 16384)
        for p in ("fwd_bwd", "fwd")
    ]
    random.Random(11).shuffle(shapes)
    return [_case(cfg, s, mb, tp, p) for cfg, s, mb, p in shapes for tp in tps]


def layer_fn(device: str, p: dict):
    """The call to time on one rank: a forward, or a forward and its backward."""
    dt = torch.bfloat16
    with torch.device(device):
        layer = TPDecoderLayer(p["hidden"], p["heads_q"], p["heads_kv"], p["ffn"], p["tp"])
    layer = layer.to(dt)
    b, s, h = p["micro_batch"], p["seq"], p["hidden"]
    x = torch.randn(b, s, h, device=device, dtype=dt, requires_grad=True)
    g = torch.randn(b, s, h, device=device, dtype=dt)
    cos, sin = rope_tables(s, layer.head_dim, device=device, dtype=dt)
    if p["pass"] == "fwd":
        return lambda: layer(x, cos, sin)
    params = [x, *layer.parameters()]
    return lambda: torch.autograd.grad(layer(x, cos, sin), params, g)


def _reps(tiny: bool, p: dict) -> int:
    if tiny:
        return 3
    return 20 if p["seq"] * p["micro_batch"] * p["hidden"] <= 4096 * 4096 * 2 else 12


def run_rank(rt) -> None:
    """Measure every case until the deadline; rank 0 writes the records."""
    distributed.measure_cases(
        rt,
        "tp_layer",
        cases(rt.job.tiny, rt.job.device, rt.world),
        build=lambda p: layer_fn(rt.device, p),
        reps_of=lambda p: _reps(rt.job.tiny, p),
        what_of=_what,
        extras_of=lambda p: {
            "structure": "fused wqkv and w_gate_up column-parallel, wo and w_down row-parallel",
            "note": "tp=1: every rank runs its own full layer, no communication"
            if p["tp"] == 1
            else "",
        },
    )


def _what(p: dict) -> str:
    comm = ", all_reduce 2 fwd + 2 bwd" if p["tp"] > 1 else ", no communication"
    return f"Megatron TP Llama decoder layer tp={p['tp']}, eager, SDPA{comm}"


def run_single(ctx, params: dict) -> dict:
    """tp = 1 on one device without a process group (a one-GPU machine)."""
    fn = layer_fn(ctx.device, params)
    timing = ctx.clock.time(fn, flush=False, min_reps=5, max_reps=30)
    return {
        "measured": {"time_s": timing.median_s},
        "source": ctx.source("Llama decoder layer tp=1, eager, SDPA", timing),
        "extra": {"stats": timing.stats()},
    }
