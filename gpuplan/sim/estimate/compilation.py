"""Layer 4, compilation: what torch.compile, CUDA graphs and recomputation change.

- Fusion (Inductor): a run of consecutive bandwidth-bound ops between two GEMM/attention
  kernels becomes one kernel that reads the run's inputs from memory once and writes only what
  leaves the run; the intermediate tensors stay on chip. Modelled by dropping, for each op after
  the first of a run, one write and one read of its input tensor (the producer's output), and
  counting one kernel per run. (Ansel et al., "PyTorch 2", ASPLOS 2024, sec. 4: Inductor fuses
  pointwise and reduction ops into Triton kernels.)
- CUDA graphs: see ``hwmodels.launch``; they remove the CPU issue cost, not the kernels.
- Recomputation: the backward re-runs the forward of each block (``sim.estimate.composite``).
"""

from __future__ import annotations

from dataclasses import replace

from gpuplan.workloads.dtypes import dtype_bytes
from gpuplan.workloads.ops import Elementwise, Memory, Op

_FUSIBLE = (Elementwise,)


def fuse_elementwise(ops: list[Op]) -> list[Op]:
    """Merge each run of consecutive elementwise ops into one fused bandwidth-bound kernel."""
    out: list[Op] = []
    run: list[Elementwise] = []
    for op in [*ops, None]:
        if isinstance(op, _FUSIBLE) and op.bytes > 0:
            run.append(op)
            continue
        if run:
            out.append(_fused(run))
            run = []
        if op is not None:
            out.append(op)
    return out


def _fused(run: list[Elementwise]) -> Op:
    if len(run) == 1:
        return run[0]
    total = sum(op.bytes for op in run)
    # each later op reads its producer's output, which no longer goes through memory
    saved = sum(2 * op.tokens * op.hidden * dtype_bytes(op.dtype) for op in run[1:])
    saved = min(saved, total / 2)  # at least one read and one write of real data remain
    name = "fused(" + "+".join(op.name for op in run) + ")"
    return Memory(name=name, op="fused", bytes_moved=total - saved)


def eager(ops: list[Op]) -> list[Op]:
    """The same ops as eager PyTorch runs them: each elementwise op in its ATen pieces."""
    return [replace(op, impl="eager") if isinstance(op, Elementwise) else op for op in ops]
