"""Decode attention as a decode step sees it, and the kernels of whole decode steps.

Two questions the contract kinds leave open, measured here on one GPU:

1. Does a one-query SDPA call against a KV cache stream the cache as fast alone (the
   ``attention`` kind: one call after an L2 flush) as it does inside a decode step, where the
   calls of ``L`` layers run back to back (CUDA graph, no launch gaps)? For a grid of batch,
   heads and cache spans, each case is timed three ways and written as contract ``attention``
   records, one file per way:
   - ``attention_isolated.jsonl``: one call after an L2 flush (the ``attention`` kind's method);
   - ``attention_sequence.jsonl``: a CUDA graph of ``L`` calls on ``L`` distinct caches (as the
     layers of a step), L2 flushed before each replay; ``time_s`` is the replay time over ``L``;
   - ``attention_sequence_masked.jsonl``: the same with an additive float mask [B, 1, 1, S]
     (the mask a padded serving batch passes; SDPA then leaves flash for another kernel).
   ``kernels.json`` names the GPU kernels one call of each case launches (does it split the
   keys?).
2. Where does a decode step's time go? torch.profiler traces of a few eager decode steps of the
   ``decode_step`` kind (``trace_<name>.json.gz``, with ``<name>.params.json``), and each step's
   CUDA-graph replay time (``steps.json``).

Run: ``python3 -m gpuplan.validate.harness.decode_probe --out DIR [--tiny] [--budget-s S]``.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from . import decode_step
from .context import make_context
from .elementwise import PRESPIN_CYCLES
from .records import RecordWriter, environment, make_record
from .trace import device_kernels

_HEADS = ((32, 32, 128), (32, 8, 128))  # Llama-2-7B (MHA) and Llama-3-8B (GQA) heads
_BATCH = (1, 2, 4, 8, 16, 32, 64, 128)
_SPANS = (256, 512, 1152, 2048, 4096, 8192)
_LAYER_BYTES_CAP = 24 * 2**30  # caches of all L calls of one case stay under this
_MAX_L = 8


def _case(b, hq, hkv, s, d) -> dict:
    return {
        "batch": b,
        "heads_q": hq,
        "heads_kv": hkv,
        "seq_q": 1,
        "seq_kv": s,
        "head_dim": d,
        "causal": False,
        "pass": "fwd",
        "dtype": "bf16",
    }


def attention_cases(tiny: bool) -> list[dict]:
    if tiny:
        return [_case(b, 4, 2, 64, 16) for b in (1, 2)]
    return [_case(b, hq, hkv, s, d) for hq, hkv, d in _HEADS for b in _BATCH for s in _SPANS]


def _cache_bytes(p: dict) -> int:
    return 2 * p["batch"] * p["heads_kv"] * p["seq_kv"] * p["head_dim"] * 2


def _calls(ctx, p: dict, n: int, masked: bool, backends=None):
    """``n`` SDPA decode calls on ``n`` distinct caches, as one function (``backends``: the
    SDPA kernels allowed; None leaves the dispatch alone)."""
    b, hq, hkv, s, d = p["batch"], p["heads_q"], p["heads_kv"], p["seq_kv"], p["head_dim"]
    q = ctx.randn(b, hq, 1, d)
    kvs = [(ctx.randn(b, hkv, s, d), ctx.randn(b, hkv, s, d)) for _ in range(n)]
    mask = None
    if masked:  # the last quarter of each row is padding, as in a bucketed serving batch
        mask = torch.zeros(b, 1, 1, s, device=ctx.device, dtype=q.dtype)
        mask[..., (3 * s) // 4 :] = float("-inf")
    gqa = hq != hkv

    def fn():
        o = None
        with sdpa_kernel(backends) if backends else contextlib.nullcontext():
            for k, v in kvs:
                o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
        return o

    return fn


def _record(ctx, p: dict, time_s: float, what: str, timing, **extra) -> dict:
    source = ctx.source(what, timing)
    stats = timing.stats()
    return make_record(
        "attention", ctx.device_key, p, {"time_s": time_s}, source, stats=stats, **extra
    )


def _graphed(ctx, fn):
    if ctx.device != "cuda":
        return fn
    return decode_step._graphed(fn)


@dataclass(frozen=True, slots=True)
class _Grid:
    """How one pass over the decode grid measures each case."""

    isolated: str  # file stem of the one-call records
    sequences: tuple[tuple[str, bool], ...]  # (file stem, masked) of the back-to-back calls
    kernel: str = ""  # "" leaves SDPA's dispatch alone; "cudnn" allows only cuDNN's kernel
    spin: int = 0  # GPU cycles spun before each one-call timing (harness.timing)


def _measure_grid(ctx, out: Path, deadline: float, grid: _Grid) -> int:
    """Every case of the grid once: its one-call record, its back-to-back records and the
    kernels one call launches (``kernels.json``); the number of cases measured."""
    cudnn = grid.kernel == "cudnn" and ctx.device == "cuda"  # on a CPU: a smoke test
    backends = [SDPBackend.CUDNN_ATTENTION] if cudnn else None
    label = " (cuDNN)" if grid.kernel == "cudnn" else ""
    extra = {"backend": grid.kernel} if grid.kernel else {}
    stems = (grid.isolated, *(stem for stem, _ in grid.sequences))
    writers = {stem: RecordWriter(out, stem) for stem in stems}
    kernels: dict[str, list[str]] = {}
    n_done = 0
    for p in attention_cases(ctx.tiny):
        if time.monotonic() > deadline:
            break
        n = max(1, min(_MAX_L, _LAYER_BYTES_CAP // _cache_bytes(p)))
        one = _calls(ctx, p, 1, masked=False, backends=backends)
        timing = ctx.clock.time(one, flush=True, prespin_cycles=grid.spin)
        what = f"SDPA decode{label}, one call"
        if grid.spin:
            what += f", GPU spins {grid.spin} cycles before the start event (device time)"
        writers[grid.isolated].write(_record(ctx, p, timing.median_s, what, timing, **extra))
        if ctx.device == "cuda":
            key = "b{batch}_hq{heads_q}_hkv{heads_kv}_s{seq_kv}".format(**p)
            kernels[key] = device_kernels(one)
        del one
        for stem, masked in grid.sequences:
            fn = _graphed(ctx, _calls(ctx, p, n, masked=masked, backends=backends))
            timing = ctx.clock.time(fn, flush=True)
            how = "in one CUDA graph" if ctx.device == "cuda" else "eagerly"
            what = f"SDPA decode{label}, {n} calls on {n} caches {how}, time / {n}"
            if masked:
                what += ", additive mask"
            record = _record(ctx, p, timing.median_s / n, what, timing, calls=n, **extra)
            writers[stem].write(record)
            del fn
        if ctx.device == "cuda":
            torch.cuda.empty_cache()
        n_done += 1
    (out / "kernels.json").write_text(json.dumps(kernels, indent=1) + "\n")
    return n_done


@torch.no_grad()
def measure_cudnn(ctx, out: Path, deadline: float) -> int:
    """cuDNN's SDPA decode kernel (PyTorch's default dispatch on Hopper picks it when cuDNN
    attention is on) over the same grid: ``attention.jsonl`` (one call after the flush, the
    ``attention`` kind's method) and ``attention_sequence.jsonl`` (calls back to back in a
    CUDA graph); ``timing.json`` names the kernel for the calibration."""
    torch.backends.cuda.enable_cudnn_sdp(True)
    # the GPU spins before each isolated call, as the elementwise kind does: cuDNN's host work
    # per call (its graph cache) otherwise outlasts the flush's head start in some cases and
    # shows up as a 50-80 us call where the kernel takes 10-30 us
    spin = PRESPIN_CYCLES if ctx.device == "cuda" else 0
    grid = _Grid("attention", (("attention_sequence", False),), kernel="cudnn", spin=spin)
    n_done = _measure_grid(ctx, out, deadline, grid)
    note = {"attention": {"kernel": "cudnn", "calls": "one-query decode, cuDNN SDPA",
                          "prespin_cycles": spin, "prespin_s": ctx.clock.spin_s(spin)}}  # fmt: skip
    (out / "timing.json").write_text(json.dumps(note, indent=1) + "\n")
    return n_done


@torch.no_grad()
def measure_attention(ctx, out: Path, deadline: float) -> int:
    """The grid under SDPA's dispatch (cuDNN attention off, as the harness runs): one call,
    back to back, and back to back with a mask."""
    sequences = (("attention_sequence", False), ("attention_sequence_masked", True))
    return _measure_grid(ctx, out, deadline, _Grid("attention_isolated", sequences))


def step_cases(tiny: bool) -> dict[str, dict]:
    if tiny:
        return {"tiny": decode_step._case((64, 4, 2, 128), 2, 2, 32, False)}
    llama2, llama3 = (4096, 32, 32, 11008), (4096, 32, 8, 14336)
    out = {f"llama2_b{b}_c1151": decode_step._case(llama2, 8, b, 1151, False) for b in (1, 8, 32)}
    out["llama3_b16_c16384"] = decode_step._case(llama3, 8, 16, 16384, False)
    out["llama3_b64_c4096"] = decode_step._case(llama3, 8, 64, 4096, False)
    return out


@torch.no_grad()
def trace_steps(ctx, out: Path) -> dict:
    acts = [torch.profiler.ProfilerActivity.CPU]
    if ctx.device == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    result = {}
    for name, p in step_cases(ctx.tiny).items():
        step = decode_step._build(ctx, p)
        eager = ctx.clock.time(step, flush=True, max_reps=20).median_s
        graph_s = None
        if ctx.device == "cuda":
            graph_s = ctx.clock.time(decode_step._graphed(step), flush=True, max_reps=20).median_s
        for _ in range(2):
            step()
        ctx.clock.sync()
        with torch.profiler.profile(activities=acts) as prof:
            for _ in range(2):
                ctx.clock.flush_l2()
                step()
            ctx.clock.sync()
        path = out / f"trace_{name}.json"
        prof.export_chrome_trace(str(path))
        with path.open("rb") as src, gzip.open(str(path) + ".gz", "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst)
        path.unlink()
        (out / f"{name}.params.json").write_text(json.dumps(p) + "\n")
        result[name] = {"params": p, "eager_s": eager, "graph_s": graph_s, "traced_steps": 2}
        del step, prof
        if ctx.device == "cuda":
            torch.cuda.empty_cache()
    (out / "steps.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--device", choices=("cpu", "cuda"), default=None)
    ap.add_argument("--budget-s", type=float, default=120.0, help="for the attention grid")
    ap.add_argument("--cudnn", action="store_true",
                    help="only the grid, on cuDNN's SDPA kernel (attention.jsonl, "
                    "timing.json)")  # fmt: skip
    args = ap.parse_args(argv)
    ctx = make_context(args.device, args.tiny)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = environment(torch, ctx.device)
    (out / "environment.json").write_text(json.dumps(env, indent=1) + "\n")
    start = time.monotonic()
    if args.cudnn:
        n = measure_cudnn(ctx, out, start + args.budget_s)
        print(f"attention (cuDNN): {n} cases in {time.monotonic() - start:.0f} s", flush=True)
        return
    n = measure_attention(ctx, out, start + args.budget_s)
    print(f"attention: {n} cases in {time.monotonic() - start:.0f} s", flush=True)
    steps = trace_steps(ctx, out)
    print(f"steps: {len(steps)} traced in {time.monotonic() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
