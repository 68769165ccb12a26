"""The time of one kernel as a breakdown: compute, memory and fixed overhead.

The overlap assumption is named once, in ``total_s``: a kernel's compute and its memory traffic
overlap fully (the roofline of Williams, Waterman and Patterson, CACM 2009), and the fixed
per-kernel overhead (launch, prologue, epilogue, event-timing floor) does not overlap either.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KernelTime:
    compute_s: float  # FLOPs over the achievable rate for this shape
    memory_s: float  # bytes over the achievable memory bandwidth
    launch_s: float  # fixed cost per kernel

    @property
    def total_s(self) -> float:  # assumption, named: compute and memory overlap fully
        return max(self.compute_s, self.memory_s) + self.launch_s

    @property
    def bound(self) -> str:
        """Which term limits the kernel: 'compute', 'memory' or 'launch'."""
        if self.launch_s >= max(self.compute_s, self.memory_s):
            return "launch"
        return "compute" if self.compute_s >= self.memory_s else "memory"

    def scaled(self, count: int) -> KernelTime:
        """``count`` identical kernels launched one after another."""
        return KernelTime(self.compute_s * count, self.memory_s * count, self.launch_s * count)


ZERO = KernelTime(0.0, 0.0, 0.0)
