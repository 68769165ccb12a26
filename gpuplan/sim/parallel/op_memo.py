"""A search's micro-batch costs with each distinct forward kernel priced once, its backward too.

``compute.micro_batch_costs`` builds each block's forward list, derives the backward list from it
(``backward_of``), and looks every kernel of both up in a memo: for thousands of shapes most of
its time goes to building backward kernels and hashing them, not to pricing. Every step between
a forward kernel and its priced items is op by op when the elementwise kernels run ``fused`` or
``eager`` (``_as_run`` maps each op alone; ``backward_of`` and the fp8 casts are per op), so the
items of one forward kernel — as run, its backward kernels, its casts and theirs — are priced
once and reused wherever it appears. ``compiled`` fuses runs of ops together, so it keeps the
list-wise path. The costs are the same items in the same order as ``micro_batch_costs`` gives
(``tests/test_op_memo.py`` pins them equal, item by item).
"""

from __future__ import annotations

from dataclasses import replace

from gpuplan.sim.breakdown import Item, priced_items
from gpuplan.sim.parallel.compute import (
    Cost,
    MicroBatchCosts,
    Shape,
    _cost,
    embedding_ops,
    head_ops,
    layer_forward_ops,
)
from gpuplan.sim.parallel.fp8 import fp8_cast_ops
from gpuplan.sim.step import _as_run, layer_groups
from gpuplan.workloads.operators import backward_of, layer_forward

PER_OP_IMPLS = ("fused", "eager")  # elementwise implementations that run op by op


class OpMemoCosts:
    """``micro_batch_costs`` of many shapes for elementwise kernels run ``impl`` (one of
    ``PER_OP_IMPLS``), each distinct forward kernel's items priced once."""

    def __init__(self, cfg, acc, eff, impl: str, kernels: dict) -> None:
        if impl not in PER_OP_IMPLS:
            raise ValueError(f"impl={impl!r}: op-by-op pricing needs one of {PER_OP_IMPLS}")
        self.cfg, self.acc, self.eff, self.impl = cfg, acc, eff, impl
        self._kernels = kernels  # (kernel, phase) -> items, shared with the list-wise path
        self._ops: dict = {}  # forward kernel -> (fwd, bwd, cast fwd, cast bwd) items
        self._extra: dict = {}  # extra backward kernel -> items
        self._base: dict = {}  # (micro-batch, tokens, layer, tp) -> layer_forward list
        self._groups = layer_groups(cfg)
        self._moe_layer = next(
            (i for i in range(cfg.n_layers) if cfg.is_moe_layer(i)), None
        )  # fmt: skip
        self._shared: dict[Shape, tuple] = {}  # by shape at ep=1, load=1: dense, head, emb

    def _priced(self, ops, phase: str) -> tuple[Item, ...]:
        out: list[Item] = []
        for op in ops:
            key = (op, phase)
            if key not in self._kernels:
                self._kernels[key] = priced_items((op,), self.acc, self.eff, phase=phase)
            out += self._kernels[key]
        return tuple(out)

    def _op_items(self, op) -> tuple:
        got = self._ops.get(op)
        if got is None:
            one = [op]
            cast_fwd, cast_bwd = fp8_cast_ops(one, self.impl)
            got = (
                self._priced(_as_run(one, self.impl), "fwd"),
                self._priced(_as_run(backward_of(one), self.impl), "bwd"),
                self._priced(cast_fwd, "fwd"),
                self._priced(cast_bwd, "bwd"),
            )
            self._ops[op] = got
        return got

    def layer_cost(self, shape: Shape, layer: int) -> Cost:
        """``compute._cost(layer_ops(cfg, shape, layer), ...)``, from the per-kernel memo."""
        key = (shape.micro_batch, shape.seq // shape.cp, layer, shape.tp)
        base = self._base.get(key)
        if base is None:
            base = layer_forward(
                self.cfg, batch=key[0], seq=key[1], layer=layer, tp=shape.tp
            )  # fmt: skip
            self._base[key] = base
        fwd, extra_bwd = layer_forward_ops(self.cfg, shape, layer, base)
        per_op = [self._op_items(op) for op in fwd]
        fwd_items: list[Item] = []
        bwd_items: list[Item] = []
        for run, _bwd, _cf, _cb in per_op:
            fwd_items += run
        for _run, _cf, cast_fwd, _cb in per_op:
            fwd_items += cast_fwd
        for _run, bwd, _cf, _cb in reversed(per_op):
            bwd_items += bwd
        for op in extra_bwd:
            got = self._extra.get(op)
            if got is None:
                got = self._extra[op] = self._priced(_as_run([op], self.impl), "bwd")
            bwd_items += got
        for _run, _bwd, _cf, cast_bwd in per_op:
            bwd_items += cast_bwd
        calls = sum(i.host_calls for i in fwd_items) + sum(i.host_calls for i in bwd_items)
        bwd_calls = sum(i.host_calls for i in bwd_items)
        host_s = calls * self.eff.host_launch_s + bwd_calls * self.eff.autograd_op_s
        return Cost(tuple(fwd_items), tuple(bwd_items), host_s)

    def __call__(self, shape: Shape) -> MicroBatchCosts:
        """The costs ``micro_batch_costs(cfg, shape, ...)`` gives."""
        cfg = self.cfg
        base = replace(shape, ep=1, load=1.0) if cfg.is_moe else shape
        shared = self._shared.get(base)
        if shared is None:
            args = (self.acc, self.eff, self.impl, self._kernels)
            dense = None
            for layer, _count in self._groups:
                if not cfg.is_moe_layer(layer):
                    dense = self.layer_cost(base, layer)  # the last dense group, as there
            shared = (
                dense,
                _cost(head_ops(cfg, base), *args),
                _cost(embedding_ops(cfg, base), *args),
            )
            self._shared[base] = shared
        moe = None
        if self._moe_layer is not None:
            for layer, _count in self._groups:
                if cfg.is_moe_layer(layer):
                    moe = self.layer_cost(shape, layer)
        return MicroBatchCosts(dense=shared[0], moe=moe, head=shared[1], embedding=shared[2])
