"""fp32 GEMMs on the CUDA cores (SIMT): plain ``torch.mm`` and small ``torch._grouped_mm``.

What Hugging Face transformers' MoE experts run over fp32 weights: PyTorch's
``_grouped_mm_fallback`` is one cuBLAS fp32 ``mm`` per group, and with TF32 off (PyTorch's
default, ``torch.backends.cuda.matmul.allow_tf32 = False``, set here for the part and restored
after) cuBLAS picks SIMT kernels (``sm80_xmma_gemm_f32f32_..._ffma``, ``gemmSN_TN_kernel`` for
a few rows). Two grids, both timings (``common``), kernels' names in ``stats``:

- ``torch.mm(x, w.t())``, ``x`` [m, k], ``w`` [n, k] (the ``nn.Linear`` layout), over m in 1 to
  4,096 rows and the (n, k) of ``grouped.py``'s expert projections, plus square m = n = k of
  1,024 to 8,192 (the rate ceiling). Records: kind ``gemm``, dtype ``fp32``.
- ``torch._grouped_mm`` fp32 as ``grouped.py`` calls it, at 2 and 8 groups where ``grouped.py``
  has no such shape (its grid has 8, 32 and 64 groups of 4 rows and more). Records: kind
  ``grouped_gemm``, dtype ``fp32``.

Calls over ``_MAX_FLOPS`` (~10 ms) are left out, the squares excepted; the part stops at
``_BOX_S`` whatever the budget, the two grids interleaved so a cut run still spans both.
"""

from __future__ import annotations

from ..harness.context import interleaved
from ..harness.records import RecordWriter
from .common import TimeBox, Timer, log, write_both_timings
from .grouped import _EXPERTS

_ROWS = (1, 4, 16, 64, 256, 1024, 4096)
_SQUARES = (1024, 2048, 4096, 8192)
_GROUPS = (2, 8)
# 9 ms at the H200's fp32 CUDA-core peak, 6.69e13 FLOP/s (hwmodels/data/accelerators.csv: the
# NVIDIA H100 whitepaper's 128 FP32 lanes x 2 FLOPs x 132 SMs x 1.98 GHz), ~10 ms as achieved
_MAX_FLOPS = 6e11
_BOX_S = 55.0  # the whole part stays under a minute on the H200


def _grouped_is_new(g: int, m: int, n: int, k: int) -> bool:
    """True where grouped.py's grid has no (groups, m, n, k) like it."""
    from .grouped import _ROWS as grouped_rows

    return (g, n, k) not in _EXPERTS or m not in grouped_rows


def cases(tiny: bool) -> list[dict]:
    """Contract params plus ``kind`` of every case, the mm and grouped grids interleaved."""
    if tiny:
        return [{"kind": "gemm", "m": 4, "n": 32, "k": 16, "dtype": "fp32"},
                {"kind": "grouped_gemm", "groups": 2, "m": 4, "n": 32, "k": 16, "dtype": "fp32"}]
    nk = list(dict.fromkeys((n, k) for _, n, k in _EXPERTS))
    mm = [{"kind": "gemm", "m": m, "n": n, "k": k, "dtype": "fp32"}
          for n, k in nk for m in _ROWS if 2 * m * n * k <= _MAX_FLOPS]
    mm += [{"kind": "gemm", "m": s, "n": s, "k": s, "dtype": "fp32"} for s in _SQUARES]
    grouped = [{"kind": "grouped_gemm", "groups": g, "m": m, "n": n, "k": k, "dtype": "fp32"}
               for n, k in nk for g in _GROUPS for m in _ROWS
               if 2 * g * m * n * k <= _MAX_FLOPS and _grouped_is_new(g, m, n, k)]
    return interleaved(mm, grouped, take_a=1, take_b=2, seed=5)


def make_fn(torch, device: str, p: dict):
    """The call to time and what it is."""
    m, n, k = p["m"], p["n"], p["k"]
    if p["kind"] == "gemm":
        x = torch.randn(m, k, device=device, dtype=torch.float32)
        w = torch.randn(n, k, device=device, dtype=torch.float32) * 0.02
        return (lambda: torch.mm(x, w.t())), "torch.mm fp32 (TF32 off), x[m,k] @ w[n,k].T"
    from . import grouped

    what = "torch._grouped_mm fp32 (TF32 off), x[g*m,k] @ w[g,n,k].transpose(-2,-1)"
    return grouped.make_fn(torch, device, {**p, "dtype": "fp32"}), what


class _NoTF32:
    """TF32 off for fp32 matmuls inside the block, the previous setting restored after."""

    def __init__(self, torch) -> None:
        self.matmul = torch.backends.cuda.matmul

    def __enter__(self):
        try:
            self.before = ("allow_tf32", self.matmul.allow_tf32)
            self.matmul.allow_tf32 = False
        except RuntimeError:  # the newer fp32_precision API is in use
            self.before = ("fp32_precision", self.matmul.fp32_precision)
            self.matmul.fp32_precision = "ieee"
        return self

    def __exit__(self, *exc) -> None:
        setattr(self.matmul, *self.before)


def run(torch, device: str, device_key: str, out_dir, box: TimeBox, tiny: bool) -> dict:
    writer = RecordWriter(out_dir, "sgemm")
    timer = Timer(torch, device, max_reps=3 if tiny else 20)
    own = TimeBox(min(box.left_s(), _BOX_S))
    failed = 0
    with _NoTF32(torch):
        for i, case in enumerate(cases(tiny)):
            if own.over():
                log(f"  sgemm: time box reached after {i} cases")
                break
            kind = case["kind"]
            params = {k: v for k, v in case.items() if k != "kind"}
            try:
                fn, what = make_fn(torch, device, case)
                fn()
            except (RuntimeError, ValueError) as exc:
                failed += 1
                log(f"  sgemm {case} FAILED {type(exc).__name__}: "
                    f"{str(exc).splitlines()[0][:120]}")
                continue
            write_both_timings(writer, timer, fn, kind, device_key, params, torch, device, what)
            del fn
            if device == "cuda":
                torch.cuda.empty_cache()
    log(f"  sgemm: {writer.count} records, {failed} failed")
    return {"records": writer.count, "failed": failed}
