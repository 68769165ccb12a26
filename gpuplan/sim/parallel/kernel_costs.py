"""Priced kernels of one micro-batch on one GPU: a block's, the LM head's or the embedding's
``Cost`` (forward and backward items, host time), and ``MicroBatchCosts`` of every block kind.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.sim.estimate.breakdown import Item, priced_items
from gpuplan.sim.estimate.composite import _as_run
from gpuplan.sim.parallel.fp8 import fp8_cast_ops
from gpuplan.workloads.ops import Op


@dataclass(frozen=True, slots=True)
class Cost:
    """Priced kernels of one micro-batch on one GPU, forward and backward, and the CPU time of
    issuing their torch calls (``hwmodels.launch``: per call, plus the autograd engine's work
    per backward call)."""

    fwd: tuple[Item, ...]
    bwd: tuple[Item, ...]
    host_s: float = 0.0

    @property
    def fwd_s(self) -> float:
        return sum(i.time_s for i in self.fwd)

    @property
    def bwd_s(self) -> float:
        return sum(i.time_s for i in self.bwd)

    def time_s(self, *, prefix: str = "", category: str = "") -> float:
        """Forward + backward time of the kernels whose name starts with ``prefix`` and whose
        class is ``category`` (either may be empty)."""
        return sum(
            i.time_s
            for i in self.fwd + self.bwd
            if i.op.startswith(prefix) and (not category or i.category == category)
        )

    def fwd_time_s(self, *, prefix: str = "") -> float:
        return sum(i.time_s for i in self.fwd if i.op.startswith(prefix))

    def flops(self, phase: str) -> float:
        return sum(i.flops for i in (self.fwd if phase == "fwd" else self.bwd))



def _priced(ops: list[Op], acc, eff, phase: str, kernels: dict | None) -> tuple[Item, ...]:
    """``priced_items`` of ``ops``, each distinct (kernel, phase) priced once per ``kernels``
    memo: the shapes of a search share most of their kernels (every ep or sp variant of a
    micro-batch size and tp runs the same attention and dense GEMMs)."""
    if kernels is None:
        return tuple(priced_items(ops, acc, eff, phase=phase))
    out: list[Item] = []
    for op in ops:
        key = (op, phase)
        if key not in kernels:
            kernels[key] = priced_items((op,), acc, eff, phase=phase)
        out += kernels[key]
    return tuple(out)


def _cost(ops: tuple[list[Op], list[Op]], acc, eff, impl: str = "fused",
          kernels: dict | None = None) -> Cost:  # fmt: skip
    fwd, bwd = (_as_run(o, impl) for o in ops)
    cast_fwd, cast_bwd = fp8_cast_ops(ops[0], impl)  # an fp8 recipe's casts (sim.parallel.fp8)
    fwd, bwd = fwd + cast_fwd, bwd + cast_bwd
    return cost_of(_priced(fwd, acc, eff, "fwd", kernels), _priced(bwd, acc, eff, "bwd", kernels),
                   eff)  # fmt: skip


def cost_of(fwd_items: tuple[Item, ...], bwd_items: tuple[Item, ...], eff) -> Cost:
    """The ``Cost`` of priced forward and backward items: the host's time is every torch call's
    launch, plus the autograd engine's share for each backward call."""
    calls = sum(i.host_calls for i in fwd_items + bwd_items)
    bwd_calls = sum(i.host_calls for i in bwd_items)
    host_s = calls * eff.host_launch_s + bwd_calls * eff.autograd_op_s
    return Cost(fwd_items, bwd_items, host_s)


@dataclass(frozen=True, slots=True)
class MicroBatchCosts:
    """A micro-batch's costs on one GPU: each block group, the LM head and the embedding."""

    dense: Cost | None  # a dense block (None when every block is MoE)
    moe: Cost | None  # an MoE block (None for dense models)
    head: Cost
    embedding: Cost

