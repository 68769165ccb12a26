"""One decode step: a new token for each of ``batch`` sequences through ``layers`` decoder layers.

Each layer (model.DecoderLayer.decode, bf16) writes the token's key and value into a
preallocated cache [batch, heads_kv, context + 1, head_dim] whose first ``context`` positions are
already filled (random), then attends with the one query against all ``context + 1`` positions
(SDPA, not causal, ``enable_gqa``). No embedding or LM head (``embedding_lm_head: false`` in each
record). ``cuda_graph`` true: the step is captured once in a ``torch.cuda.CUDAGraph`` (after
warm-up on a side stream) and each timed call is one ``replay()``; false: eager, so the time
includes the launch of every kernel. The L2 is flushed before each timed step, as the previous
step's last layer would have left it cold for the first. Runs under ``torch.no_grad()``.
"""

from __future__ import annotations

import random

import torch

from .model import CONFIGS, DecoderLayer, rope_tables

_LAYERS = (2, 4, 8, 16)
_BATCH = (1, 4, 16, 64, 128, 256)
_CONTEXT = (128, 1024, 4096, 16384)
_KV_CAP_BYTES = 48 * 2**30
_WEIGHT_CAP_BYTES = 30 * 2**30


def _case(cfg, layers, batch, context, graph) -> dict:
    hidden, hq, hkv, ffn = cfg
    return {
        "hidden": hidden,
        "heads_q": hq,
        "heads_kv": hkv,
        "ffn": ffn,
        "layers": layers,
        "batch": batch,
        "context": context,
        "cuda_graph": graph,
        "dtype": "bf16",
    }


def kv_cache_bytes(p: dict) -> int:
    """K and V of every layer, ``context + 1`` positions, bf16."""
    head_dim = p["hidden"] // p["heads_q"]
    return 2 * p["layers"] * p["batch"] * (p["context"] + 1) * p["heads_kv"] * head_dim * 2


def weight_bytes(p: dict) -> int:
    """bf16 weights of the layers (fused qkv, o, gate+up, down; two norms)."""
    h, hq, hkv, f = p["hidden"], p["heads_q"], p["heads_kv"], p["ffn"]
    d = h // hq
    per_layer = h * (hq + 2 * hkv) * d + hq * d * h + 3 * h * f + 2 * h
    return 2 * p["layers"] * per_layer


def cases(tiny: bool, device: str) -> list[dict]:
    """Eager and CUDA-graph cases in pairs of the same shape, shapes shuffled."""
    graphs = (False, True) if device == "cuda" else (False,)
    if tiny:
        return [_case((64, 4, 2, 128), 2, b, 32, g) for b in (1, 4) for g in graphs]
    shapes = [
        (cfg, n, b, c)
        for cfg in CONFIGS.values()
        for n in _LAYERS
        for b in _BATCH
        for c in _CONTEXT
    ]
    random.Random(5).shuffle(shapes)
    out = []
    for shape in shapes:
        pair = [_case(*shape, g) for g in graphs]
        if kv_cache_bytes(pair[0]) <= _KV_CAP_BYTES and weight_bytes(pair[0]) <= _WEIGHT_CAP_BYTES:
            out += pair
    return out


def _build(ctx, p: dict):
    cfg = (p["hidden"], p["heads_q"], p["heads_kv"], p["ffn"])
    dtype = ctx.dtype(p["dtype"])
    with torch.device(ctx.device):
        layers = [DecoderLayer(*cfg).to(dtype) for _ in range(p["layers"])]
    b, ctx_len, d = p["batch"], p["context"], p["hidden"] // p["heads_q"]
    shape = (b, p["heads_kv"], ctx_len + 1, d)
    caches = [(ctx.randn(*shape), ctx.randn(*shape)) for _ in layers]
    x = ctx.randn(b, 1, p["hidden"], dtype=p["dtype"])
    cos, sin = rope_tables(1, d, start=ctx_len, device=ctx.device, dtype=dtype)

    def step():
        h = x
        for layer, (k_cache, v_cache) in zip(layers, caches, strict=True):
            h = layer.decode(h, cos, sin, k_cache, v_cache, ctx_len)
        return h

    return step


def _graphed(step):
    """Capture ``step`` in a CUDA graph after warm-up on a side stream; return its replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


@torch.no_grad()
def measure(params: dict, ctx) -> dict:
    """Median time of one decode step (eager, or one CUDA graph replay)."""
    step = _build(ctx, params)
    fn = _graphed(step) if params["cuda_graph"] else step
    probe_before_s = ctx.clock.host_probe_s()
    timing = ctx.clock.time(fn, flush=True, max_reps=40)
    probe_s = (probe_before_s, ctx.clock.host_probe_s())  # host speed around the timing
    what = "decode step, CUDA graph replay" if params["cuda_graph"] else "decode step, eager"
    return {
        "measured": {"time_s": timing.median_s},
        "source": ctx.source(f"{what}, SDPA on a bf16 KV cache", timing),
        "extra": {
            "stats": timing.stats() | {"host_probe_s": probe_s},
            "embedding_lm_head": False,
            "kv_cache_bytes": kv_cache_bytes(params),
            "weight_bytes": weight_bytes(params),
        },
    }
