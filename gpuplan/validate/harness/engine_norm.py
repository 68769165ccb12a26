"""The residual add + RMSNorm of a serving engine's decode and prefill, timed on one GPU.

vLLM V1 compiles the model with Inductor and, under Inductor, turns its custom ops off
(``CompilationConfig.custom_ops`` defaults to ``["none"]`` when the backend is Inductor: vLLM docs,
"vllm.config.CompilationConfig"), so its ``RMSNorm.forward_native`` (residual add, fp32 mean of
squares, rsqrt, scale) becomes one Inductor-generated Triton kernel; SGLang and TensorRT-LLM run a
hand-written one-pass fused add+RMSNorm kernel of the same shape (one block per row). Two forms:

    inductor   torch.compile of vLLM's forward_native (dynamic in the token count)
    aten       x + r, then F.rms_norm (eager PyTorch: the kernels the campaign's rmsnorm timed)

Two timings per case, on 8 rotating input sets:
    graph_per_call_s  one CUDA graph of 64 calls, replayed; the median replay over 64: what a
                      decode step under CUDA graphs pays a call, launch gaps included
    kernel_s          the profiler's summed kernel time of one call (median of 20 calls)

    python3 -m gpuplan.validate.harness.engine_norm OUT_DIR [--tiny]

writes OUT_DIR/engine_norm.jsonl, one JSON object a case (``scripts/fit_engine_norm.py`` reads it).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

EPS = 1e-6
TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 2048)
HIDDEN = (2048, 2880, 4096, 5120, 7168, 8192, 12288, 16384)
CALLS_PER_GRAPH = 64
REPLAYS = 21  # the first replay is left out (warm-up), the median of the other 20 kept
PROFILED_CALLS = 20
SETS = 8


def forward_native(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor):
    """vLLM's ``RMSNorm.forward_native`` with a residual (vllm/model_executor/layers/layernorm.py)."""
    x = x.float() + residual.float()
    residual = x.to(torch.bfloat16)
    variance = x.pow(2).mean(dim=-1, keepdim=True)
    x = x * torch.rsqrt(variance + EPS)
    return x.to(torch.bfloat16) * weight, residual


def aten(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor):
    residual = x + residual
    return F.rms_norm(residual, (residual.shape[-1],), weight, EPS), residual


def _graph_per_call_s(fn, sets) -> float:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for s in sets:
            fn(*s)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(CALLS_PER_GRAPH):
            fn(*sets[i % len(sets)])
    times = []
    for _ in range(REPLAYS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3 / CALLS_PER_GRAPH)
    return statistics.median(times[1:])


def _kernel_s(fn, sets) -> tuple[float, float]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(PROFILED_CALLS):
            fn(*sets[i % len(sets)])
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type.name == "CUDA"]
    total_s = sum(e.device_time for e in events) * 1e-6  # device_time in microseconds
    return total_s / PROFILED_CALLS, len(events) / PROFILED_CALLS


def _check(fn, x, r, w) -> float:
    y, _ = fn(x, r, w)
    s = (x.double() + r.double())
    ref = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + EPS) * w.double()
    return float((y.double() - ref).norm() / ref.norm())


def measure(out: Path, tiny: bool) -> None:
    compiled = torch.compile(forward_native, dynamic=True)
    tokens, hidden = ((1, 16), (4096,)) if tiny else (TOKENS, HIDDEN)
    name = torch.cuda.get_device_name(0)
    with (out / "engine_norm.jsonl").open("w") as f:
        for h in hidden:
            for t in tokens:
                sets = [(torch.randn(t, h, device="cuda", dtype=torch.bfloat16),
                         torch.randn(t, h, device="cuda", dtype=torch.bfloat16),
                         torch.randn(h, device="cuda", dtype=torch.bfloat16))
                        for _ in range(SETS)]  # fmt: skip
                for form, fn in (("inductor", compiled), ("aten", aten)):
                    err = _check(fn, *sets[0])
                    kernel_s, kernels = _kernel_s(fn, sets)
                    row = {"form": form, "tokens": t, "hidden": h, "dtype": "bf16",
                           "graph_per_call_s": _graph_per_call_s(fn, sets),
                           "kernel_s": kernel_s, "kernels_per_call": kernels,
                           "rel_error": err, "device": name,
                           "torch": torch.__version__}  # fmt: skip
                    f.write(json.dumps(row) + "\n")
                    print(f"{form:9s} t={t:5d} h={h:6d} graph {row['graph_per_call_s'] * 1e6:7.2f} us"
                          f"  kernels {kernel_s * 1e6:7.2f} us ({kernels:.0f})  err {err:.1e}",
                          flush=True)  # fmt: skip


if __name__ == "__main__":
    out_dir = Path(sys.argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    measure(out_dir, "--tiny" in sys.argv)
