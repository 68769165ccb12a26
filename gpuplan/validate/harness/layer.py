"""One Llama-style decoder layer (model.DecoderLayer), bf16 weights and activations.

``fwd`` times the forward with grad enabled (a training forward: activations are kept for
backward); ``fwd_bwd`` times forward plus ``torch.autograd.grad`` of the output for a random
output gradient with respect to the input and every weight. ``compiled`` wraps the layer in
``torch.compile`` (inductor, default mode) with the batch and sequence dimensions marked dynamic
(``maybe_mark_dynamic``), so one compile per layer configuration serves all its batch sizes and
sequence lengths; the first call (untimed) compiles, warm-up calls absorb any recompile.

peak_bytes (ACTIVATION_DEFINITION below) is the memory one forward keeps for backward: on CUDA,
``torch.cuda.memory_allocated()`` right after a forward with grad enabled minus right before it,
the input (requires_grad) allocated before, the output counted. On the CPU, where there is no
allocator counter, the bytes of the distinct storages autograd saved plus the output's.
No L2 flush: a layer's weights and activations are many times the L2.
"""

from __future__ import annotations

import random

import torch

from .model import CONFIGS, DecoderLayer, rope_tables

ACTIVATION_DEFINITION = (
    "torch.cuda.memory_allocated() after a forward with grad enabled minus before it; the input "
    "(requires_grad) allocated before, the output counted"
)
CPU_ACTIVATION_DEFINITION = "bytes of distinct storages saved by autograd in one forward + output"

_SEQ_MB = ((512, 1), (1024, 2), (2048, 1), (2048, 4), (4096, 1), (4096, 2), (8192, 1), (1024, 8))
_MAX_TOKENS = {"big": 8192}
_compiled: dict[tuple, object] = {}
_compile_failure: list[str] = []  # the first compile error; later compiled cases skip at once


def _case(cfg, seq, mb, pass_, compiled) -> dict:
    hidden, hq, hkv, ffn = cfg
    return {
        "hidden": hidden,
        "heads_q": hq,
        "heads_kv": hkv,
        "ffn": ffn,
        "seq": seq,
        "micro_batch": mb,
        "pass": pass_,
        "compiled": compiled,
        "dtype": "bf16",
    }


def cases(tiny: bool, device: str) -> list[dict]:
    """Eager cases first (shuffled), then compiled ones grouped by configuration."""
    if tiny:
        cfg = (64, 4, 2, 128)
        return [_case(cfg, 16, 2, p, c) for c in (False, True) for p in ("fwd_bwd", "fwd")]
    eager = [
        _case(cfg, s, mb, p, False)
        for name, cfg in CONFIGS.items()
        for s, mb in _SEQ_MB
        if s * mb <= _MAX_TOKENS.get(name, 16384)
        for p in ("fwd", "fwd_bwd")
    ]
    random.Random(3).shuffle(eager)
    compiled = [
        _case(CONFIGS[name], s, mb, p, True)
        for name in ("llama3-8b", "small", "llama2-7b")
        for s, mb in ((2048, 1), (4096, 2), (1024, 4), (8192, 1))
        for p in ("fwd_bwd", "fwd")
    ]
    return eager[:30] + compiled + eager[30:]


def _layer(ctx, p: dict):
    """A fresh bf16 layer, or the compiled one of this configuration (built once)."""
    key = (p["hidden"], p["heads_q"], p["heads_kv"], p["ffn"])
    if p["compiled"] and key in _compiled:
        return _compiled[key]
    with torch.device(ctx.device):
        layer = DecoderLayer(*key).to(ctx.dtype(p["dtype"]))
    if not p["compiled"]:
        return layer
    _compiled.clear()  # keep one compiled layer's weights at a time
    _compiled[key] = torch.compile(layer, backend=ctx.compile_backend)
    return _compiled[key]


def make_step(ctx, p: dict):
    """(layer, forward fn, fwd_bwd fn) of the case, on random inputs."""
    layer = _layer(ctx, p)
    b, s, h = p["micro_batch"], p["seq"], p["hidden"]
    dtype = ctx.dtype(p["dtype"])
    x = ctx.randn(b, s, h, dtype=p["dtype"], requires_grad=True)
    g = ctx.randn(b, s, h, dtype=p["dtype"])
    cos, sin = rope_tables(s, h // p["heads_q"], device=ctx.device, dtype=dtype)
    if p["compiled"]:  # one compile per layer shape serves every batch and sequence length
        for t, dims in ((x, (0, 1)), (g, (0, 1)), (cos, (0,)), (sin, (0,))):
            for dim in dims:
                torch._dynamo.maybe_mark_dynamic(t, dim)
    params = [x, *layer.parameters()]

    def fwd():
        return layer(x, cos, sin)

    def fwd_bwd():
        return torch.autograd.grad(layer(x, cos, sin), params, g)

    return layer, fwd, fwd_bwd


def activation_bytes(ctx, fwd) -> int:
    """Memory one forward keeps for backward (the module docstring gives the definition)."""
    if ctx.device == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        out = fwd()
        torch.cuda.synchronize()
        kept = torch.cuda.memory_allocated() - before
        del out
        return kept
    return _saved_bytes(fwd)


def _saved_bytes(fwd) -> int:
    """CPU stand-in: distinct storages saved by autograd during ``fwd``, plus its output."""
    seen: dict[int, int] = {}

    def pack(t):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fwd()
    return sum(seen.values()) + out.untyped_storage().nbytes()


def _first_call(fn, compiled: bool) -> None:
    """Run once; for a compiled layer this compiles, and a failure disables later compiles."""
    if compiled and _compile_failure:
        raise RuntimeError(f"skipped: torch.compile failed earlier ({_compile_failure[0]})")
    try:
        fn()
    except Exception as exc:
        if compiled:
            _compile_failure.append(f"{type(exc).__name__}: {str(exc)[:200]}")
            _compiled.clear()
        raise


def measure(params: dict, ctx) -> dict:
    """Median time of the pass and the forward's activation memory."""
    _, fwd, fwd_bwd = make_step(ctx, params)
    fn = fwd_bwd if params["pass"] == "fwd_bwd" else fwd
    _first_call(fn, params["compiled"])  # compiles forward (and backward) where compiled
    timing = ctx.clock.time(fn, flush=False, min_reps=5, max_reps=30)
    peak = activation_bytes(ctx, fwd)
    definition = ACTIVATION_DEFINITION if ctx.device == "cuda" else CPU_ACTIVATION_DEFINITION
    what = (
        "eager" if not params["compiled"] else f"torch.compile({ctx.compile_backend}, dynamic B,S)"
    )
    return {
        "measured": {"time_s": timing.median_s, "peak_bytes": int(peak)},
        "source": ctx.source(f"Llama decoder layer, {what}, SDPA", timing),
        "extra": {
            "stats": timing.stats(),
            "peak_bytes_definition": definition,
            "structure": "fused wqkv, fused w_gate_up, rotate-half RoPE, F.rms_norm, SDPA causal",
        },
    }
