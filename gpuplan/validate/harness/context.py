"""What every kind's measurement needs: torch, the device, the clock, and how to say where a
number came from. Also the dtype names of the contract and random (never zero) inputs, and the
setting up of torch for a run's device (``make_context``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .records import device_key
from .timing import Clock, Timing


@dataclass(frozen=True, slots=True, kw_only=True)
class Context:
    """A run's settings, handed to every case."""

    torch: object
    device: str  # "cuda" or "cpu"
    device_key: str  # accelerator catalogue key written into each record
    clock: Clock
    tiny: bool
    compile_backend: str  # "inductor" on GPUs; "aot_eager" in --tiny runs (fast to build)

    def dtype(self, name: str):
        """torch dtype for a contract dtype name (tf32 is fp32 storage)."""
        t = self.torch
        table = {
            "fp32": t.float32,
            "tf32": t.float32,
            "bf16": t.bfloat16,
            "fp16": t.float16,
            "fp8": t.float8_e4m3fn,
            "int8": t.int8,
        }
        return table[name]

    def randn(self, *shape, dtype="bf16", requires_grad: bool = False, scale: float = 1.0):
        """Normal random tensor on the device; fp8 and int8 are cast or drawn accordingly."""
        t = self.torch
        if dtype == "int8":
            return t.randint(-128, 128, shape, dtype=t.int8, device=self.device)
        draw = t.float32 if dtype == "fp8" else self.dtype(dtype)
        x = t.randn(*shape, device=self.device, dtype=draw)
        x = (x * scale if scale != 1.0 else x).to(self.dtype(dtype))
        return x.requires_grad_(requires_grad) if requires_grad else x

    def source(self, what: str, timing: Timing) -> str:
        """Short provenance string: library, timer, statistic, L2 treatment, device."""
        t = self.torch
        if self.device == "cuda":
            lib = f"torch {t.__version__.split('+')[0]} cu{(t.version.cuda or '').replace('.', '')}"
            timer = "CUDA events"
            gpu = t.cuda.get_device_name(0)
        else:
            lib, timer, gpu = f"torch {t.__version__}", "perf_counter", "CPU"
        l2 = "L2 flushed (256 MB write) before each run" if timing.l2 == "flushed" else "no flush"
        return f"{lib}, {what}, {timer}, median of {len(timing.times_s)}, {l2}, {gpu}"


def _setup_torch(device: str):
    import torch

    if device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("--device cuda: torch sees no CUDA device")
        # Flash first for every SDPA call (layers too): no cuDNN attention in the dispatch.
        torch.backends.cuda.enable_cudnn_sdp(False)
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 64)
    return torch


def make_context(device: str | None, tiny: bool, device_name_key: str | None = None):
    """Set torch up for ``device`` (cuda where available when None) and build the Context."""
    import torch as _torch

    device = device or ("cuda" if _torch.cuda.is_available() else "cpu")
    torch = _setup_torch(device)
    name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    return Context(
        torch=torch,
        device=device,
        device_key=device_name_key or device_key(name),
        clock=Clock(torch, device, min_reps=3 if tiny else 10, max_reps=5 if tiny else 50),
        tiny=tiny,
        compile_backend="aot_eager" if tiny else "inductor",
    )


def interleaved(a: list, b: list, *, take_a: int, take_b: int, seed: int) -> list:
    """``a`` and ``b`` shuffled (one ``random.Random(seed)``, ``a`` first), then ``take_a`` of ``a``
    and ``take_b`` of ``b`` in turn: a run that stops at its time box still spans both grids."""
    rng = random.Random(seed)
    a, b = list(a), list(b)
    rng.shuffle(a)
    rng.shuffle(b)
    out = []
    while a or b:
        out += a[:take_a] + b[:take_b]
        a, b = a[take_a:], b[take_b:]
    return out
