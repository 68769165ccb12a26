"""A whole training step of a small Llama-style model (model.TrainModel), bf16 mixed precision.

The model is fp32 (master weights); forward and loss run under ``torch.autocast(bfloat16)``;
``torch.optim.AdamW(fused=True)`` on CUDA (the foreach form on the CPU). A step is
``zero_grad(set_to_none=True)``, forward with cross-entropy, backward, ``optimizer.step()``;
time_s is the median over steps after warm-up steps that create the optimizer state.
``recompute='full'`` wraps every layer in ``torch.utils.checkpoint`` (use_reentrant=False).

peak_bytes (PEAK_DEFINITION) is ``torch.cuda.max_memory_allocated()`` over one step after
``reset_peak_memory_stats()``, with the fp32 model, the gradients of the previous step and the
AdamW state already allocated (the gradients are freed by zero_grad at the start of the step and
re-created in backward). On the CPU it is an estimate: weights, gradients and optimizer state
plus the bytes autograd saved in the forward.
"""

from __future__ import annotations

import random

import torch

from .model import TrainModel, rope_tables

PEAK_DEFINITION = (
    "torch.cuda.max_memory_allocated() over one step after reset_peak_memory_stats(); fp32 "
    "weights, previous gradients and AdamW state allocated before; grads freed by zero_grad"
)
CPU_PEAK_DEFINITION = "estimate: weights + grads + optimizer state + autograd-saved bytes"

# (hidden, heads_q, heads_kv, ffn)
_SHAPES = {2048: (2048, 16, 8, 8192), 4096: (4096, 32, 8, 14336)}
_GRID = (
    # hidden, layers, vocab, seq, micro_batch, recompute
    (2048, 4, 32000, 2048, 2, "none"),
    (4096, 2, 128256, 4096, 1, "none"),
    (4096, 4, 32000, 2048, 1, "full"),
    (2048, 8, 128256, 2048, 4, "full"),
    (4096, 8, 128256, 4096, 1, "none"),
    (2048, 2, 32000, 4096, 1, "none"),
    (4096, 4, 128256, 2048, 2, "full"),
    (2048, 16, 32000, 2048, 1, "none"),
    (4096, 16, 32000, 4096, 1, "full"),
    (2048, 4, 128256, 4096, 2, "none"),
    (4096, 2, 32000, 2048, 4, "none"),
    (2048, 8, 32000, 4096, 2, "full"),
    (4096, 8, 32000, 2048, 2, "none"),
    (2048, 2, 128256, 2048, 8, "full"),
    (4096, 4, 32000, 4096, 2, "none"),
    (2048, 16, 128256, 4096, 1, "full"),
    (4096, 2, 128256, 2048, 1, "full"),
    (2048, 4, 32000, 2048, 2, "full"),
    (4096, 16, 128256, 2048, 1, "none"),
    (2048, 8, 32000, 2048, 8, "none"),
    (4096, 8, 32000, 4096, 2, "full"),
    (2048, 2, 32000, 2048, 1, "none"),
)


def _case(vocab, hidden, hq, hkv, ffn, layers, seq, mb, recompute) -> dict:
    return {
        "vocab": vocab,
        "hidden": hidden,
        "heads_q": hq,
        "heads_kv": hkv,
        "ffn": ffn,
        "layers": layers,
        "seq": seq,
        "micro_batch": mb,
        "recompute": recompute,
        "optimizer": "adamw",
        "precision": "bf16-mixed",
    }


def cases(tiny: bool, device: str) -> list[dict]:
    """A grid over width, depth, vocabulary, tokens and recomputation, most varied first."""
    if tiny:
        return [_case(256, 64, 4, 2, 128, 2, 16, 2, r) for r in ("none", "full")]
    out = [_case(v, *_SHAPES[h], n, s, mb, r) for h, n, v, s, mb, r in _GRID]
    rest = out[4:]  # the first four span the grid; keep them first
    random.Random(4).shuffle(rest)
    return out[:4] + rest


def _build(ctx, p: dict):
    keys = ("vocab", "hidden", "heads_q", "heads_kv", "ffn", "layers", "recompute")
    with torch.device(ctx.device):
        model = TrainModel(**{k: p[k] for k in keys})
    fused = {"fused": True} if ctx.device == "cuda" else {"foreach": True}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **fused)
    b, s = p["micro_batch"], p["seq"]
    tokens = torch.randint(0, p["vocab"], (b, s + 1), device=ctx.device)
    cos, sin = rope_tables(s, p["hidden"] // p["heads_q"], device=ctx.device)
    return model, opt, tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous(), cos, sin


def make_step(ctx, p: dict):
    """(model, optimizer, step fn, forward-loss fn) on random token ids."""
    model, opt, inputs, targets, cos, sin = _build(ctx, p)
    autocast = torch.autocast(ctx.device, dtype=torch.bfloat16)

    def loss():
        with autocast:
            return model(inputs, targets, cos, sin)

    def step():
        opt.zero_grad(set_to_none=True)
        loss().backward()
        opt.step()

    return model, opt, step, loss


def _state_bytes(model, opt) -> int:
    tensors = [*model.parameters(), *(p.grad for p in model.parameters() if p.grad is not None)]
    tensors += [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
    return sum(t.numel() * t.element_size() for t in tensors)


def _peak_bytes(ctx, model, opt, step, loss) -> tuple[int, int]:
    """(peak over one step, allocated before it); see the module docstring."""
    if ctx.device == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated(), before
    from .layer import _saved_bytes

    state = _state_bytes(model, opt)
    return state + _saved_bytes(loss), state


def _adamw(ctx) -> str:
    return "AdamW(fused=True)" if ctx.device == "cuda" else "AdamW(foreach=True)"


def measure(params: dict, ctx) -> dict:
    """Median time of a whole optimizer step and the step's peak memory."""
    model, opt, step, loss = make_step(ctx, params)
    timing = ctx.clock.time(step, flush=False, warmup=2, min_reps=4, max_reps=10)
    peak, before = _peak_bytes(ctx, model, opt, step, loss)
    n_params = sum(p.numel() for p in model.parameters())
    del model, opt
    definition = PEAK_DEFINITION if ctx.device == "cuda" else CPU_PEAK_DEFINITION
    return {
        "measured": {"time_s": timing.median_s, "peak_bytes": int(peak)},
        "source": ctx.source(f"train step, fp32 master + bf16 autocast, {_adamw(ctx)}", timing),
        "extra": {
            "stats": timing.stats(),
            "peak_bytes_definition": definition,
            "allocated_before_step_bytes": int(before),
            "num_params": n_params,
            "tokens_per_step": params["seq"] * params["micro_batch"],
        },
    }
