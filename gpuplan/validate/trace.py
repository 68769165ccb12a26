"""Reading Kineto (torch.profiler) Chrome traces: which GPU kernels ran, and time per class.

A trace written by ``torch.profiler.profile(...).export_chrome_trace`` (optionally gzipped) is a
JSON object whose ``traceEvents`` list holds complete events (``"ph": "X"``) with ``ts`` and
``dur`` in microseconds; GPU kernels have ``"cat": "kernel"`` and their stream in
``args["stream"]`` (else ``tid``). Only kernels are read: memcpy/memset events and CPU operators
are left out, so class shares are shares of kernel time, not of the step's wall time.

Kernel names are sorted into operator classes by the names that cuBLAS, FlashAttention, NCCL,
PyTorch's ATen and inductor's Triton kernels carry (``classify_kernel``); the first rule that
matches wins, and names no rule knows fall into ``other``.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pandas as pd

from gpuplan.errors import GpuplanError

CLASSES = (
    "gemm",
    "attention_fwd",
    "attention_bwd",
    "norm",
    "elementwise",
    "softmax",
    "reduce",
    "copy_cast",
    "optimizer",
    "nccl",
    "other",
)

# (class, pattern) in order; matched against the lower-cased kernel name.
_RULES: tuple[tuple[str, str], ...] = (
    ("nccl", r"nccl"),
    ("attention_bwd", r"flash_bwd|fmha\w*cutlassb|fmha.*(bwd|backward)|sdpa.*bprop|attn.*bwd"),
    ("attention_fwd", r"flash_fwd|fmha\w*cutlassf|fmha|sdpa.*fprop|attn.*fwd|flash_attn"),
    ("optimizer", r"adam|multi_tensor_apply|sgd|optimizer"),
    ("gemm", r"triton_tem_|gemm|gemv|nvjet|cutlass|xmma|wgmma|s16816|h16816|matmul|_mm_|splitk"),
    ("norm", r"triton_\w*(norm|rsqrt)|layer_norm|layernorm|rms_?norm|gammabeta|batch_norm"),
    ("softmax", r"softmax"),
    ("copy_cast", r"copy_kernel|direct_copy|catarray|memcpy|memset|transpose|to_copy_kernel"),
    ("reduce", r"triton_(red|per)_|reduce|nll_loss|cross_entropy|mean|sum_kernel"),
    ("elementwise", r"triton_poi_|elementwise|vectorized|unrolled|dropout|activation|silu|gelu"),
)
_COMPILED = tuple((cls, re.compile(pattern)) for cls, pattern in _RULES)


def classify_kernel(name: str) -> str:
    """Operator class of a GPU kernel name (one of CLASSES)."""
    lowered = name.lower()
    for cls, pattern in _COMPILED:
        if pattern.search(lowered):
            return cls
    return "other"


def load_trace(trace_path: str | Path) -> dict:
    """The trace's JSON object, from ``.json`` or ``.json.gz``."""
    path = Path(trace_path)
    if not path.exists():
        raise GpuplanError(f"trace_path={str(path)!r} does not exist")
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt") as f:
            trace = json.load(f)
    except (OSError, json.JSONDecodeError) as exc:
        raise GpuplanError(f"trace_path={str(path)!r} is not a JSON trace: {exc}") from None
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise GpuplanError(
            f"trace_path={str(path)!r} has no 'traceEvents' list: not a Kineto/Chrome trace"
        )
    return trace


def kernels(trace_path: str | Path) -> pd.DataFrame:
    """GPU kernel events: name, class, start_s (from the first kernel), dur_s, stream."""
    events = [
        e
        for e in load_trace(trace_path)["traceEvents"]
        if e.get("cat") == "kernel" and e.get("ph", "X") == "X"
    ]
    columns = ["name", "class", "start_s", "dur_s", "stream"]
    if not events:
        return pd.DataFrame(columns=columns)
    first_us = min(float(e["ts"]) for e in events)
    rows = [
        {
            "name": e["name"],
            "class": classify_kernel(e["name"]),
            "start_s": (float(e["ts"]) - first_us) * 1e-6,
            "dur_s": float(e.get("dur", 0.0)) * 1e-6,
            "stream": (e.get("args") or {}).get("stream", e.get("tid")),
        }
        for e in events
    ]
    return pd.DataFrame(rows, columns=columns).sort_values("start_s", ignore_index=True)


def kernel_table(trace_path: str | Path) -> pd.DataFrame:
    """Per operator class: count, total_s and share of all kernel time, largest first."""
    raw = kernels(trace_path)
    if raw.empty:
        return pd.DataFrame(columns=["class", "count", "total_s", "share"])
    table = raw.groupby("class").agg(count=("dur_s", "size"), total_s=("dur_s", "sum"))
    table["share"] = table["total_s"] / table["total_s"].sum()
    return table.sort_values("total_s", ascending=False).reset_index()
