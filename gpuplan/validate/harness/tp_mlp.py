"""Megatron tensor-parallel SwiGLU MLP (Shoeybi et al. 2019, Megatron-LM, section 3, fig. 3).

Each of ``tp`` ranks holds a column-parallel slice of the fused gate+up weight
[2 ffn / tp, hidden] and a row-parallel slice of the down weight [hidden, ffn / tp]:

    forward   y_r = (silu(x Wg_r^T) * (x Wu_r^T)) Wd_r^T ;  y = all_reduce(sum_r y_r)     ("g")
    backward  dx_r from the rank's slices ;                dx = all_reduce(sum_r dx_r)   ("f")

x [tokens, hidden] is replicated; bf16 throughout. ``fwd`` times the forward with grad enabled;
``fwd_bwd`` times forward plus ``torch.autograd.grad`` of y (random gradient) for x and the
weights. ``time_s`` is the median over repetitions of the slowest rank's time (distributed.time_ranks; no
GPU spin before the start, so where the CPU is the bottleneck torch's launch overhead is in it,
as in an eager training step); ``stats.fastest_rank_median_s`` holds the other statistic. tp=1
runs the same MLP with no communication; in a world of two processes each rank then runs its
own copy at the same time, and the slowest rank's time is recorded, as for tp > 1.
"""

from __future__ import annotations

import random

import torch
import torch.distributed as dist
import torch.nn.functional as F

from . import distributed

_SHAPES = ((4096, 14336), (8192, 28672), (4096, 11008))
_TOKENS = (512, 2048, 8192, 16384)


class _ReduceForward(torch.autograd.Function):
    """Megatron's "g": all-reduce in forward, identity in backward."""

    @staticmethod
    def forward(ctx, x):
        dist.all_reduce(x)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class _ReduceBackward(torch.autograd.Function):
    """Megatron's "f": identity in forward, all-reduce of the gradient in backward."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad)
        return grad


def _case(hidden, ffn, tokens, tp, pass_) -> dict:
    return {
        "hidden": hidden,
        "ffn": ffn,
        "tokens": tokens,
        "tp": tp,
        "pass": pass_,
        "dtype": "bf16",
    }


def cases(tiny: bool, device: str, world: int) -> list[dict]:
    """tp = world and tp = 1 for every shape, token count and pass; tp pairs kept together."""
    tps = sorted({1, world}, reverse=True)
    if tiny:
        return [_case(64, 256, 32, tp, p) for p in ("fwd", "fwd_bwd") for tp in tps]
    shapes = [(h, f, t, p) for h, f in _SHAPES for t in _TOKENS for p in ("fwd_bwd", "fwd")]
    random.Random(7).shuffle(shapes)
    return [_case(h, f, t, tp, p) for h, f, t, p in shapes for tp in tps]


def _mlp_fn(rt, p: dict):
    tp, h, f_local = p["tp"], p["hidden"], p["ffn"] // p["tp"]
    dt = torch.bfloat16
    x = torch.randn(p["tokens"], h, device=rt.device, dtype=dt, requires_grad=True)
    w_gate_up = torch.randn(2 * f_local, h, device=rt.device, dtype=dt) * h**-0.5
    w_down = torch.randn(h, f_local, device=rt.device, dtype=dt) * f_local**-0.5
    weights = [w_gate_up.requires_grad_(), w_down.requires_grad_()]
    g = torch.randn(p["tokens"], h, device=rt.device, dtype=dt)

    def forward():
        xin = _ReduceBackward.apply(x) if tp > 1 else x
        gate, up = F.linear(xin, w_gate_up).chunk(2, dim=-1)
        y = F.linear(F.silu(gate) * up, w_down)
        return _ReduceForward.apply(y) if tp > 1 else y

    if p["pass"] == "fwd":
        return forward
    return lambda: torch.autograd.grad(forward(), [x, *weights], g)


def run_rank(rt) -> None:
    """Measure every case whose tp fits the world until the deadline; rank 0 writes."""
    distributed.measure_cases(
        rt,
        "tp_mlp",
        cases(rt.job.tiny, rt.job.device, rt.world),
        build=lambda p: _mlp_fn(rt, p),
        reps_of=lambda p: 3 if rt.job.tiny else 20,
        what_of=lambda p: f"Megatron TP SwiGLU MLP tp={p['tp']}, F.linear, all_reduce fwd+bwd",
        extras_of=lambda p: {
            "note": "tp=1: every rank runs its own full MLP, no communication"
            if p["tp"] == 1
            else ""
        },
    )


def run_single(ctx, params: dict) -> dict:
    """tp=1 on one device without a process group (a one-GPU machine)."""
    rt = distributed.Rank(rank=0, world=1, device=ctx.device, job=None)
    fn = _mlp_fn(rt, params)
    timing = ctx.clock.time(fn, flush=False)
    return {
        "measured": {"time_s": timing.median_s},
        "source": ctx.source("SwiGLU MLP tp=1, F.linear", timing),
        "extra": {"stats": timing.stats()},
    }
