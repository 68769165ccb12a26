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
import math
import re
import zlib
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
    """The trace's JSON object, from ``.json`` or ``.json.gz``; a file that is not one (binary,
    not UTF-8, truncated, not JSON) is a one-line GpuplanError."""
    path = Path(trace_path)
    name = f"trace_path={str(path)!r}"
    if not path.exists():
        raise GpuplanError(f"{name} does not exist")
    try:
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, zlib.error) as exc:
        raise GpuplanError(f"{name} cannot be read: {' '.join(str(exc).split())}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GpuplanError(f"{name} is not a JSON trace: not UTF-8 text (byte {exc.start}); "
                           "a binary file?") from None  # fmt: skip
    try:
        trace = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GpuplanError(f"{name} is not a JSON trace: {exc.msg} (line {exc.lineno}, column "
                           f"{exc.colno})") from None  # fmt: skip
    except (ValueError, RecursionError) as exc:  # an integer of 5,000 digits, nesting too deep
        raise GpuplanError(f"{name} is not a JSON trace: {' '.join(str(exc).split())}") from None
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise GpuplanError(f"{name} has no 'traceEvents' list: not a Kineto/Chrome trace")
    return trace


def _kernel_event(event, k: int, path) -> dict | None:
    """The fields of one kernel event, checked (None: not a complete kernel event)."""
    if not isinstance(event, dict) or event.get("cat") != "kernel" or event.get("ph", "X") != "X":
        return None
    where = f"trace {str(path)!r}: traceEvents[{k}] (a kernel)"
    name, ts, dur = event.get("name"), event.get("ts"), event.get("dur", 0.0)
    if not isinstance(name, str):
        raise GpuplanError(f"{where}: name={name!r} is invalid: it must be a string")
    for field, value in (("ts", ts), ("dur", dur)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise GpuplanError(f"{where}: {field}={value!r} is invalid: it must be a finite "
                               "number of microseconds")  # fmt: skip
    if dur < 0:
        raise GpuplanError(f"{where}: dur={dur!r} is invalid: it must be zero or more")
    args = event.get("args")
    stream = args.get("stream", event.get("tid")) if isinstance(args, dict) else event.get("tid")
    return {"name": name, "ts": float(ts), "dur": float(dur), "stream": stream}


def kernels(trace_path: str | Path) -> pd.DataFrame:
    """GPU kernel events: name, class, start_s (from the first kernel), dur_s, stream."""
    events = load_trace(trace_path)["traceEvents"]
    checked = (_kernel_event(event, k, trace_path) for k, event in enumerate(events))
    found = [e for e in checked if e is not None]
    columns = ["name", "class", "start_s", "dur_s", "stream"]
    if not found:
        return pd.DataFrame(columns=columns)
    first_us = min(e["ts"] for e in found)
    rows = [
        {
            "name": e["name"],
            "class": classify_kernel(e["name"]),
            "start_s": (e["ts"] - first_us) * 1e-6,
            "dur_s": e["dur"] * 1e-6,
            "stream": e["stream"],
        }
        for e in found
    ]
    return pd.DataFrame(rows, columns=columns).sort_values("start_s", ignore_index=True)


def kernel_table(trace_path: str | Path, *, require_kernels: bool = False) -> pd.DataFrame:
    """Per operator class: count, total_s and share of all kernel time, largest first. With
    ``require_kernels``, a trace without GPU kernels is a GpuplanError (what the command line
    asks: such a trace cannot say where GPU time went)."""
    raw = kernels(trace_path)
    if raw.empty:
        if require_kernels:
            raise GpuplanError(
                f"trace {str(trace_path)!r} holds no GPU kernels (events with cat 'kernel'): "
                "profile on a GPU with ProfilerActivity.CUDA among the activities"
            )
        return pd.DataFrame(columns=["class", "count", "total_s", "share"])
    table = raw.groupby("class").agg(count=("dur_s", "size"), total_s=("dur_s", "sum"))
    table["share"] = table["total_s"] / table["total_s"].sum()
    return table.sort_values("total_s", ascending=False).reset_index()
