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
# how elementwise ops run: a hand-fused kernel each, eager PyTorch's pieces, Inductor's fusion
IMPLS = ("fused", "eager", "compiled")


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


def _is(op, kind: str, pass_: str = "fwd") -> bool:
    return isinstance(op, Elementwise) and op.op == kind and op.pass_ == pass_


def _same_rows(a: Elementwise, b: Elementwise) -> bool:
    return (a.tokens, a.hidden, a.count) == (b.tokens, b.hidden, b.count)


def fuse_residual_norms(ops: list[Op]) -> list[Op]:
    """A serving engine's block: each residual add runs inside the RMSNorm that follows it, one
    kernel reading x and the residual and writing the normalized output and the new residual
    (vLLM ``RMSNorm.forward`` with ``residual``: ``fused_add_rms_norm``, or under Inductor its
    ``forward_native`` compiled to one kernel; SGLang's ``RMSNorm.forward_cuda``:
    ``fused_add_rmsnorm``; TensorRT-LLM's ``RMSNorm`` with a residual). An add followed by an
    RMSNorm of the same shape becomes one ``add_rmsnorm``; the block's last residual add runs
    inside the next block's input norm, so a block that starts with an RMSNorm and ends its
    stream of elementwise ops with an unpaired add takes that add into its first norm (the first
    block's norm has no add and the final norm takes the last block's: the count is the same)."""
    out: list[Op] = []
    for op in ops:
        prev = out[-1] if out else None
        if _is(op, "rmsnorm") and prev is not None and _is(prev, "add") and _same_rows(prev, op):
            out[-1] = replace(op, name=f"{prev.name}+{op.name}", op="add_rmsnorm")
            continue
        out.append(op)
    first = next((i for i, op in enumerate(out) if isinstance(op, Elementwise)), None)
    last = next((i for i in range(len(out) - 1, -1, -1) if _is(out[i], "add")), None)
    if (first is not None and last is not None and last > first and _is(out[first], "rmsnorm")
            and _same_rows(out[first], out[last])):
        head, tail = out[first], out[last]
        out[first] = replace(head, name=f"{tail.name}+{head.name}", op="add_rmsnorm")
        del out[last]
    return out


def eager(ops: list[Op]) -> list[Op]:
    """The same ops as eager PyTorch runs them: each elementwise op in its ATen pieces."""
    return [replace(op, impl="eager") if isinstance(op, Elementwise) else op for op in ops]
