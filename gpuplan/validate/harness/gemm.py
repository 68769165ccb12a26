"""GEMM: C[m, n] = A[m, k] · W[n, k]^T, the layout of ``nn.Linear`` (W row-major, used transposed).

Per dtype: bf16 and fp16 through ``torch.matmul`` (cuBLAS); fp32 with TF32 off and tf32 with it
on (``torch.backends.cuda.matmul.allow_tf32``); fp8 through ``torch._scaled_mm`` (e4m3 inputs,
per-tensor fp32 scales, bf16 output; B = W^T is column-major as it requires; k and n multiples
of 16); int8 through ``torch._int_mm`` (int32 output; m > 16, k and n multiples of 8). Shapes run
from GEMVs (m = 1) to tens of thousands, odd sizes included, and the GEMMs of Llama and GPT layers
at several token counts. L2 flushed before each timed call.
"""

from __future__ import annotations

import random

import torch

# Llama-3-8B, Llama-2-7B, Llama-3-70B and GPT-3 175B layer GEMMs as (n, k) of y = x W^T:
# fused qkv, attention output, fused gate+up (or fc1), down (or fc2).
_LAYER_NK = (
    (6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336),  # llama3-8b
    (12288, 4096), (22016, 4096), (4096, 11008),  # llama2-7b
    (10240, 8192), (8192, 8192), (57344, 8192), (8192, 28672),  # llama3-70b
    (36864, 12288), (12288, 12288), (49152, 12288), (12288, 49152),  # gpt3-175b
)  # fmt: skip
_TOKENS = (512, 2048, 4096, 8192, 16384)
_SQUARE = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
_ODD = ((1000, 1000, 1000), (4095, 4095, 4095), (11008, 4096, 4096), (4096, 11008, 4096),
        (14336, 4096, 4095), (28672, 1000, 4096), (3000, 5000, 7000), (8191, 8191, 8191),
        (1, 4095, 11008), (77, 14336, 4096), (333, 28672, 8192), (2047, 2049, 2051))  # fmt: skip
_GEMV_M = (1, 2, 4, 8, 16, 32, 64, 128, 256)
_GEMV_NK = ((4096, 4096), (6144, 4096), (28672, 4096), (4096, 14336), (57344, 8192))
_WGRAD = ((4096, 14336, 8192), (14336, 4096, 8192), (4096, 4096, 16384), (8192, 28672, 4096))


def _shapes() -> list[tuple[int, int, int]]:
    """Every (m, n, k) of interest, before dtype constraints."""
    shapes = [(s, s, s) for s in _SQUARE] + list(_ODD) + list(_WGRAD)
    shapes += [(m, n, k) for (n, k) in _LAYER_NK for m in _TOKENS]
    shapes += [(m, n, k) for (n, k) in _GEMV_NK for m in _GEMV_M]
    return list(dict.fromkeys(shapes))


def _fits(dtype: str, m: int, n: int, k: int) -> bool:
    """Library constraints and a cap on the slowest cases (fp32 runs near 50 TFLOP/s)."""
    if dtype == "fp8":
        return n % 16 == 0 and k % 16 == 0
    if dtype == "int8":
        return m > 16 and n % 8 == 0 and k % 8 == 0
    if dtype in ("fp32", "tf32"):
        return 2 * m * n * k <= 2 * 8192**3
    return True


# How many shapes each dtype gets at most; ~250 records in all.
_PER_DTYPE = {"bf16": 95, "fp16": 25, "fp32": 22, "tf32": 25, "fp8": 50, "int8": 40}


def cases(tiny: bool, device: str) -> list[dict]:
    """Contract params of every case, the most informative first (dtypes interleaved)."""
    if tiny:
        dtypes = ["bf16", "fp32", "tf32"] + (["fp8", "int8"] if device == "cuda" else [])
        shapes = [(m, 64, 64) for m in (1, 32)]
        return [
            {"m": m, "n": n, "k": k, "dtype": d}
            for d in dtypes
            for m, n, k in shapes
            if _fits(d, m, n, k)
        ]
    rng = random.Random(0)
    per_dtype = []
    for dtype, count in _PER_DTYPE.items():
        shapes = [s for s in _shapes() if _fits(dtype, *s)]
        anchors = [s for s in shapes if s[0] == s[1] == s[2]]  # squares first: the rate curve
        rest = [s for s in shapes if s not in anchors]
        rng.shuffle(rest)
        chosen = (anchors + rest)[:count]
        per_dtype.append([{"m": m, "n": n, "k": k, "dtype": dtype} for m, n, k in chosen])
    return _round_robin(per_dtype)


def _round_robin(lists: list[list[dict]]) -> list[dict]:
    out = []
    for i in range(max(map(len, lists))):
        out += [items[i] for items in lists if i < len(items)]
    return out


def _tf32() -> bool:
    try:
        return bool(torch.backends.cuda.matmul.allow_tf32)
    except RuntimeError:  # the newer fp32_precision API is in use
        return torch.backends.cuda.matmul.fp32_precision == "tf32"


def _set_tf32(on: bool) -> None:
    try:
        torch.backends.cuda.matmul.allow_tf32 = on
    except RuntimeError:
        torch.backends.cuda.matmul.fp32_precision = "tf32" if on else "ieee"


def _matmul_fn(ctx, m: int, n: int, k: int, dtype: str):
    """The call to time and a description of the library path."""
    if dtype == "fp8":
        a, w = ctx.randn(m, k, dtype="fp8"), ctx.randn(n, k, dtype="fp8")
        one = torch.ones((), device=ctx.device, dtype=torch.float32)
        fn = lambda: torch._scaled_mm(a, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)  # noqa: E731
        return fn, "torch._scaled_mm e4m3 per-tensor scales, bf16 out"
    if dtype == "int8":
        a, w = ctx.randn(m, k, dtype="int8"), ctx.randn(n, k, dtype="int8")
        b = w.t()
        try:
            torch._int_mm(a, b)
        except RuntimeError:  # some builds want B row-major [k, n]
            b = b.contiguous()
        layout = "column-major" if b.stride(0) == 1 else "row-major"
        return (lambda: torch._int_mm(a, b)), f"torch._int_mm int8 -> int32, B {layout}"
    a, w = ctx.randn(m, k, dtype=dtype), ctx.randn(n, k, dtype=dtype)
    lib = "torch.matmul (cuBLAS)" if ctx.device == "cuda" else "torch.matmul"
    return (lambda: torch.matmul(a, w.t())), f"{lib} {dtype}, a[m,k] @ w[n,k].T"


def measure(params: dict, ctx) -> dict:
    """Median time of one C = A W^T of the case's shape and dtype."""
    m, n, k, dtype = params["m"], params["n"], params["k"], params["dtype"]
    previous = _tf32()
    _set_tf32(dtype == "tf32")
    try:
        fn, what = _matmul_fn(ctx, m, n, k, dtype)
        timing = ctx.clock.time(fn, flush=True)
    finally:
        _set_tf32(previous)
    flops = 2 * m * n * k
    return {
        "measured": {"time_s": timing.median_s},
        "source": ctx.source(what, timing),
        "extra": {"stats": timing.stats(), "achieved_flops_per_s": flops / timing.median_s},
    }
