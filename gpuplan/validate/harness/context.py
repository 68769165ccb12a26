"""What every kind's measurement needs: torch, the device, the clock, and how to say where a
number came from. Also the dtype names of the contract and random (never zero) inputs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

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
