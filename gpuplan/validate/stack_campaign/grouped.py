"""Grouped GEMMs as Hugging Face transformers' MoE experts run them (``stack: pytorch``).

``torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)``: ``x`` [groups * m, k] holds the rows
routed to each expert back to back (``m`` rows a group), ``w`` [groups, n, k] the experts'
weights in ``nn.Linear`` layout, ``offs`` the int32 cumulative row counts: the call of
transformers' ``grouped_mm_experts_forward`` (``integrations/moe.py``, ``experts_implementation
="grouped_mm"``) for one projection. bf16 runs PyTorch's CUTLASS kernel; fp32 (what the experts
run under autocast over fp32 weights) takes ``_grouped_mm_fallback``, one ``mm`` per group.

Shapes: the expert projections of Mixtral-8x7B (8 experts, 4096 -> 2 x 14336 gate+up, 14336 ->
4096 down), DeepSeek-V2-Lite (64 experts, 2048 -> 2 x 1408, 1408 -> 2048) and a
DeepSeek-V3-sized expert (256 experts of 7168 -> 2 x 2048; 32 of them here, what one GPU of
8-way expert parallelism holds), at 4 to 4,096 rows per group; forward only, both timings.
Records: kind ``grouped_gemm`` (``validate/record_kinds.py``), params ``groups``, ``m`` (rows per
group), ``n``, ``k``, ``dtype``.
"""

from __future__ import annotations

from ..harness.context import interleaved
from ..harness.records import RecordWriter
from .common import TimeBox, Timer, log, write_both_timings

# (groups, n, k) of one projection: gate+up fused, then down
_EXPERTS = ((8, 28672, 4096), (8, 4096, 14336),  # Mixtral-8x7B
            (64, 2816, 2048), (64, 2048, 1408),  # DeepSeek-V2-Lite
            (32, 4096, 7168), (32, 7168, 2048))  # DeepSeek-V3 experts, 32 of 256
_ROWS = (4, 16, 64, 256, 1024, 4096)
_MAX_FLOPS = {"bf16": 4e12, "fp32": 6e11}  # caps the slowest calls (~10 ms)


def cases(tiny: bool) -> list[dict]:
    if tiny:
        return [{"groups": 2, "m": 8, "n": 32, "k": 16, "dtype": "bf16"}]
    out = {"bf16": [], "fp32": []}
    for g, n, k in _EXPERTS:
        for m in _ROWS:
            for dt in out:
                if 2 * g * m * n * k <= _MAX_FLOPS[dt]:
                    out[dt].append({"groups": g, "m": m, "n": n, "k": k, "dtype": dt})
    return interleaved(out["bf16"], out["fp32"], take_a=2, take_b=1, seed=3)


def make_fn(torch, device: str, p: dict):
    dt = {"bf16": torch.bfloat16, "fp32": torch.float32}[p["dtype"]]
    if device != "cuda":
        dt = torch.float32
    g, m, n, k = p["groups"], p["m"], p["n"], p["k"]
    x = torch.randn(g * m, k, device=device, dtype=dt)
    w = torch.randn(g, n, k, device=device, dtype=dt) * 0.02
    offs = torch.arange(1, g + 1, device=device, dtype=torch.int32) * m
    if device != "cuda" or not hasattr(torch, "_grouped_mm"):  # the CPU smoke path
        return lambda: torch.cat([x[i * m:(i + 1) * m] @ w[i].t() for i in range(g)])
    return lambda: torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)


def run(torch, device: str, device_key: str, out_dir, box: TimeBox, tiny: bool) -> dict:
    writer = RecordWriter(out_dir, "grouped")
    timer = Timer(torch, device, max_reps=3 if tiny else 20)
    failed = 0
    for i, p in enumerate(cases(tiny)):
        if box.over():
            log(f"  grouped: time box reached after {i} cases")
            break
        try:
            fn = make_fn(torch, device, p)
            fn()
        except (RuntimeError, ValueError) as exc:
            failed += 1
            log(f"  grouped {p} FAILED {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
            continue
        what = f"torch._grouped_mm {p['dtype']}, x[g*m,k] @ w[g,n,k].transpose(-2,-1)"
        write_both_timings(writer, timer, fn, "grouped_gemm", device_key, p, torch, device, what)
        del fn
        if device == "cuda":
            torch.cuda.empty_cache()
    log(f"  grouped: {writer.count} records, {failed} failed")
    return {"records": writer.count, "failed": failed}
