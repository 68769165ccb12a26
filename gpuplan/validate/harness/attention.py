"""Attention: ``scaled_dot_product_attention`` on q [B, Hq, Sq, D] and k, v [B, Hkv, Skv, D].

The flash backend is asked for first (``sdpa_kernel([FLASH_ATTENTION])``, Dao 2023,
FlashAttention-2); where it refuses a case the default dispatch runs it, and the record's
``backend`` key says which. GQA uses ``enable_gqa=True`` (no repeated k/v in memory). ``fwd_bwd``
is the forward plus ``torch.autograd.grad`` of the output for a random output gradient (dq, dk,
dv). Prefill/training cases keep about 16k tokens per call (batch = 16384 // seq, at least 1);
decode cases are one query per sequence against a filled cache (not causal). L2 flushed before
each timed call.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from .context import interleaved

# (heads_q, heads_kv, head_dim): Llama-3-8B, Llama-2-7B, a head_dim-64 MHA model, Llama-3-70B.
_HEADS = ((32, 8, 128), (32, 32, 128), (16, 16, 64), (64, 8, 128))
_SEQS = (128, 512, 1024, 2048, 4096, 8192, 16384, 32768)
_DECODE_BATCH = (1, 8, 32, 128, 256)
_DECODE_CTX = (512, 2048, 8192, 32768)
_KV_CAP_BYTES = 32 * 2**30  # keep decode caches well inside the GPU's memory
_MATH_MAX_SCORES = 4096 * 4096
_ANY_BACKEND = [
    SDPBackend.FLASH_ATTENTION,
    SDPBackend.EFFICIENT_ATTENTION,
    SDPBackend.CUDNN_ATTENTION,
    SDPBackend.MATH,
]


def _case(b, hq, hkv, sq, skv, d, causal, pass_, dtype="bf16") -> dict:
    return {
        "batch": b,
        "heads_q": hq,
        "heads_kv": hkv,
        "seq_q": sq,
        "seq_kv": skv,
        "head_dim": d,
        "causal": causal,
        "pass": pass_,
        "dtype": dtype,
    }


def _train_cases() -> list[dict]:
    out = []
    for hq, hkv, d in _HEADS:
        for s in _SEQS:
            for causal in (True, False):
                for p in ("fwd", "fwd_bwd"):
                    out.append(_case(max(1, 16384 // s), hq, hkv, s, s, d, causal, p))
    return out


def _decode_cases() -> list[dict]:
    out = []
    for hq, hkv, d in (h for h in _HEADS if h[2] == 128):
        for b in _DECODE_BATCH:
            for ctx in _DECODE_CTX:
                if 2 * b * hkv * ctx * d * 2 <= _KV_CAP_BYTES:
                    out.append(_case(b, hq, hkv, 1, ctx, d, False, "fwd"))
    return out


def cases(tiny: bool, device: str) -> list[dict]:
    """Prefill/training and decode cases, shuffled and interleaved two to one."""
    if tiny:
        return [
            _case(1, 4, 2, 32, 32, 16, True, "fwd"),
            _case(2, 4, 4, 32, 32, 16, False, "fwd_bwd"),
            _case(2, 4, 2, 1, 64, 16, False, "fwd"),
        ]
    return interleaved(_train_cases(), _decode_cases(), take_a=2, take_b=1, seed=1)


def _sdpa_fn(ctx, p: dict, backends):
    b, hq, hkv, d = p["batch"], p["heads_q"], p["heads_kv"], p["head_dim"]
    grad = p["pass"] == "fwd_bwd"
    q = ctx.randn(b, hq, p["seq_q"], d, dtype=p["dtype"], requires_grad=grad)
    k = ctx.randn(b, hkv, p["seq_kv"], d, dtype=p["dtype"], requires_grad=grad)
    v = ctx.randn(b, hkv, p["seq_kv"], d, dtype=p["dtype"], requires_grad=grad)
    g = ctx.randn(b, hq, p["seq_q"], d, dtype=p["dtype"]) if grad else None
    kwargs = {"is_causal": p["causal"], "enable_gqa": hq != hkv}

    def fn():
        with sdpa_kernel(backends):
            o = F.scaled_dot_product_attention(q, k, v, **kwargs)
            return torch.autograd.grad(o, (q, k, v), g) if grad else o

    return fn


def measure(params: dict, ctx) -> dict:
    """Median time of one attention call (and its backward for fwd_bwd)."""
    fn = _sdpa_fn(ctx, params, [SDPBackend.FLASH_ATTENTION])
    backend = "flash"
    try:
        fn()
    except RuntimeError:  # flash refused this case: let the dispatcher choose
        backend = "default dispatch (flash refused)"
        # The math backend materialises the [Sq, Skv] scores: only for short sequences.
        small = params["seq_q"] * params["seq_kv"] <= _MATH_MAX_SCORES
        fn = _sdpa_fn(ctx, params, _ANY_BACKEND if small else _ANY_BACKEND[:-1])
    timing = ctx.clock.time(fn, flush=True)
    what = f"F.scaled_dot_product_attention ({backend})"
    return {
        "measured": {"time_s": timing.median_s},
        "source": ctx.source(what, timing),
        "extra": {"stats": timing.stats(), "backend": backend},
    }
