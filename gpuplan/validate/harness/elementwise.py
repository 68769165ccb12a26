"""Memory-bound operators on x [tokens, hidden], as eager torch implements them.

    layernorm    F.layer_norm(x, (hidden,), weight, bias)         weight, bias [hidden]
    rmsnorm      F.rms_norm(x, (hidden,), weight)                 weight [hidden]
    gelu         F.gelu(x)                                        exact (erf) form
    silu_mul     F.silu(a) * b                                    a, b [tokens, hidden]
    softmax      F.softmax(x, dim=-1)                             over hidden
    add          x + y                                            y [tokens, hidden]
    dropout_add  F.dropout(x, 0.1, training=True) + r             r [tokens, hidden]

``fwd`` runs on inputs that do not require grad; ``fwd_bwd`` runs the forward on inputs (and
norm weights) that do, then ``torch.autograd.grad`` of the output for a random output gradient
with respect to all of them. The bytes each op reads and writes are listed in
docs/dev/campaign.md; how many kernels each launches is counted by the trace step
(harness.trace.count_kernels), after all timing, so the profiler never runs before a timed case.
L2 flushed before each timed call.
"""

from __future__ import annotations

import random

import torch
import torch.nn.functional as F

OPS = ("layernorm", "rmsnorm", "gelu", "silu_mul", "softmax", "add", "dropout_add")
_TOKENS = (1, 16, 256, 2048, 8192, 32768, 65536)
_HIDDEN = (1024, 4096, 8192, 16384)


def cases(tiny: bool, device: str) -> list[dict]:
    """Every op, pass, token count and width, shuffled so any prefix is diverse."""
    tokens, hidden = ((1, 8), (32,)) if tiny else (_TOKENS, _HIDDEN)
    out = [
        {"op": op, "tokens": t, "hidden": h, "pass": p, "dtype": "bf16"}
        for op in OPS
        for p in ("fwd", "fwd_bwd")
        for t in tokens
        for h in hidden
    ]
    if not tiny:
        random.Random(2).shuffle(out)
    return out


def _inputs(ctx, op: str, t: int, h: int, dtype: str, grad: bool) -> tuple:
    """The op's tensor inputs: the activations, then any weights."""
    x = ctx.randn(t, h, dtype=dtype, requires_grad=grad)
    if op in ("silu_mul", "add", "dropout_add"):
        return x, ctx.randn(t, h, dtype=dtype, requires_grad=grad)
    if op == "layernorm":
        w = ctx.randn(h, dtype=dtype, requires_grad=grad)
        return x, w, ctx.randn(h, dtype=dtype, requires_grad=grad)
    if op == "rmsnorm":
        return x, ctx.randn(h, dtype=dtype, requires_grad=grad)
    return (x,)


def _apply(op: str, inputs: tuple):
    x, h = inputs[0], inputs[0].shape[-1]
    if op == "layernorm":
        return F.layer_norm(x, (h,), inputs[1], inputs[2])
    if op == "rmsnorm":
        return F.rms_norm(x, (h,), inputs[1])
    if op == "gelu":
        return F.gelu(x)
    if op == "silu_mul":
        return F.silu(x) * inputs[1]
    if op == "softmax":
        return F.softmax(x, dim=-1)
    if op == "add":
        return x + inputs[1]
    if op == "dropout_add":
        return F.dropout(x, 0.1, training=True) + inputs[1]
    raise ValueError(f"op={op!r} is unknown: choose one of {', '.join(OPS)}")


def make_fn(ctx, p: dict):
    """The call to time: the op, or the op and its backward."""
    grad = p["pass"] == "fwd_bwd"
    inputs = _inputs(ctx, p["op"], p["tokens"], p["hidden"], p["dtype"], grad)
    if not grad:
        return lambda: _apply(p["op"], inputs)
    g = ctx.randn(p["tokens"], p["hidden"], dtype=p["dtype"])
    return lambda: torch.autograd.grad(_apply(p["op"], inputs), inputs, g)


# The GPU spins this many cycles after the L2 flush, before the start event (about 0.5 ms on an
# H200 at 1.98 GHz), longer than the CPU takes to issue any case's forward and backward: every
# record is then the device's time of the call's kernels, queued back to back. Without it the
# CPU's launch and autograd work races the ~60 us flush, and a small fwd_bwd lands on either
# side of that race from one run to the next (the first H200 run and its repeat on a second GPU
# differ by a p90 of 38% on the same cases).
PRESPIN_CYCLES = 1_000_000


def timing_note(ctx) -> dict:
    """What the run's ``timing.json`` says of this kind: the spin before each timed call."""
    return {"prespin_cycles": PRESPIN_CYCLES, "prespin_s": ctx.clock.spin_s(PRESPIN_CYCLES)}


def measure(params: dict, ctx) -> dict:
    """Median device time of one call of the op (and its backward for fwd_bwd)."""
    probe_before_s = ctx.clock.host_probe_s()
    spin = PRESPIN_CYCLES if ctx.device == "cuda" else 0
    timing = ctx.clock.time(make_fn(ctx, params), flush=True, prespin_cycles=spin)
    probe_s = (probe_before_s, ctx.clock.host_probe_s())  # host speed around the timing
    what = f"eager torch {params['op']}"
    if spin:
        what += f", GPU spins {spin} cycles before the start event (device time, no launch gap)"
    return {
        "measured": {"time_s": timing.median_s},
        "source": ctx.source(what, timing),
        "extra": {"stats": timing.stats() | {"host_probe_s": probe_s, "prespin_cycles": spin}},
    }
