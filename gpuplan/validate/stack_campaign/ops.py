"""GEMM and elementwise ops under PyTorch's default dispatch (``stack: pytorch``), both timings.

The calls are the harness's own (``harness/gemm.py``: ``C = A · Wᵀ`` in the nn.Linear layout;
``harness/elementwise.py``: the op, or the op and its backward), run without the harness's L2
flush and GPU pre-spin: ``isolated`` and ``device`` timing as ``common`` defines them. A subset
of the harness's shapes: the layer GEMMs of 7-70B models, decode GEMVs, square sizes; the ops at
decode, prefill and training token counts.
"""

from __future__ import annotations

from ..harness import elementwise as h_elementwise
from ..harness import gemm as h_gemm
from ..harness.context import interleaved
from ..harness.records import RecordWriter
from .common import TimeBox, Timer, lib_source, log, make_record, timed

_GEMM_DTYPES = ("bf16", "fp16", "fp8")
_GEMM_SHAPES = (
    (4096, 6144, 4096), (4096, 4096, 4096), (4096, 28672, 4096), (4096, 4096, 14336),
    (16384, 6144, 4096), (16384, 4096, 14336), (1024, 1024, 1024), (2048, 2048, 2048),
    (8192, 8192, 8192), (1, 6144, 4096), (8, 28672, 4096), (32, 4096, 14336),
    (128, 6144, 4096), (512, 4096, 4096), (2048, 128256, 4096), (16, 57344, 8192),
)
_EW_TOKENS = (16, 2048, 16384)
_EW_HIDDEN = (4096, 8192)


def cases(tiny: bool) -> list[dict]:
    if tiny:
        return [{"kind": "gemm", "m": 64, "n": 32, "k": 48, "dtype": "bf16"},
                {"kind": "elementwise", "op": "rmsnorm", "tokens": 16, "hidden": 64,
                 "pass": "fwd_bwd", "dtype": "bf16"}]
    gemm = [{"kind": "gemm", "m": m, "n": n, "k": k, "dtype": dt}
            for m, n, k in _GEMM_SHAPES for dt in _GEMM_DTYPES
            if not (dt == "fp8" and (m <= 16 or k % 16 or n % 16))]
    ew = [{"kind": "elementwise", "op": op, "tokens": t, "hidden": h, "pass": p, "dtype": "bf16"}
          for op in h_elementwise.OPS for t in _EW_TOKENS for h in _EW_HIDDEN
          for p in ("fwd", "fwd_bwd")]
    return interleaved(gemm, ew, take_a=1, take_b=2, seed=2)


def _context(torch, device: str, device_key: str):
    from ..harness.context import Context
    from ..harness.timing import Clock

    return Context(torch=torch, device=device, device_key=device_key,
                   clock=Clock(torch, device), tiny=device != "cuda", compile_backend="inductor")


def run(torch, device: str, device_key: str, out_dir, box: TimeBox, tiny: bool) -> dict:
    writer = RecordWriter(out_dir, "ops")
    timer = Timer(torch, device, max_reps=3 if tiny else 20)
    ctx = _context(torch, device, device_key)
    failed = 0
    for i, case in enumerate(cases(tiny)):
        if box.over():
            log(f"  ops: time box reached after {i} cases")
            break
        kind = case["kind"]
        params = {k: v for k, v in case.items() if k != "kind"}
        try:
            if kind == "gemm":
                fn, what = h_gemm._matmul_fn(ctx, params["m"], params["n"], params["k"],
                                             params["dtype"])
            else:
                fn, what = h_elementwise.make_fn(ctx, params), f"{params['op']} (eager ATen)"
            fn()
        except (RuntimeError, ValueError) as exc:
            failed += 1
            log(f"  ops {case} FAILED {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
            continue
        for timing in ("isolated", "device"):
            stats = timed(timer, fn, timing)
            if stats is None:
                continue
            rec = make_record(kind, device_key, dict(params, stack="pytorch", timing=timing),
                              {"time_s": stats["median_s"]},
                              lib_source(torch, device, what, stats), stats=stats)
            writer.write(rec)
        del fn
    log(f"  ops: {writer.count} records, {failed} failed")
    return {"records": writer.count, "failed": failed}

