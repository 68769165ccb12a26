"""One GPU's compute for one micro-batch, priced by the one-GPU kernel models: every block kind,
the LM head and the embedding of a ``Shape`` (``micro_batch_costs``), and a search's shapes each
priced once (``CostCache``). The kernel lists are in ``kernel_lists``, their pricing in
``kernel_costs``.
"""

from __future__ import annotations

from dataclasses import replace

from gpuplan.sim.estimate.composite import layer_groups
from gpuplan.sim.parallel.kernel_costs import Cost, MicroBatchCosts, _cost
from gpuplan.sim.parallel.kernel_lists import embedding_ops, head_ops, layer_ops
from gpuplan.sim.parallel.op_memo import PER_OP_IMPLS, OpMemoCosts
from gpuplan.sim.parallel.shape import Shape


def micro_batch_costs(cfg, shape: Shape, acc, eff, impl: str = "fused",
                      kernels: dict | None = None) -> MicroBatchCosts:  # fmt: skip
    """Price every distinct block of ``cfg`` and the end-stage work for ``shape``, with the
    elementwise kernels as ``impl`` runs them (fused, eager or compiled: ``sim.estimate.compilation``);
    ``kernels``: a memo of priced kernels shared between shapes."""
    by_kind: dict[str, Cost] = {}
    for layer, _count in layer_groups(cfg):
        kind = "moe" if cfg.is_moe_layer(layer) else "dense"
        by_kind[kind] = _cost(layer_ops(cfg, shape, layer), acc, eff, impl, kernels)
    return MicroBatchCosts(
        dense=by_kind.get("dense"),
        moe=by_kind.get("moe"),
        head=_cost(head_ops(cfg, shape), acc, eff, impl, kernels),
        embedding=_cost(embedding_ops(cfg, shape), acc, eff, impl, kernels),
    )


class CostCache:
    """Micro-batch costs by shape, priced once each: the few distinct shapes of a search."""

    def __init__(self, cfg, acc, eff, impl: str = "fused") -> None:
        self.cfg, self.acc, self.eff, self.impl = cfg, acc, eff, impl
        self._memo: dict[Shape, MicroBatchCosts] = {}
        self._kernels: dict = {}  # (kernel, phase) -> its items, shared by the shapes
        self._shared: dict[Shape, MicroBatchCosts] = {}  # by shape at ep=1, load=1
        self._by_op = None  # op_memo.OpMemoCosts, made on first use

    def __call__(self, shape: Shape) -> MicroBatchCosts:
        if shape not in self._memo:
            self._memo[shape] = self._price(shape)
        return self._memo[shape]

    def _price(self, shape: Shape) -> MicroBatchCosts:
        """A dense block, the head and the embedding do not depend on ep or the expert load:
        an MoE model's shapes that differ only there share them, and price the MoE block."""
        if self.impl in PER_OP_IMPLS:  # each forward kernel's items priced once (op_memo)
            if self._by_op is None:
                self._by_op = OpMemoCosts(self.cfg, self.acc, self.eff, self.impl, self._kernels)
            return self._by_op(shape)
        args = (self.acc, self.eff, self.impl, self._kernels)
        if not self.cfg.is_moe or (shape.ep == 1 and shape.load == 1.0):
            return micro_batch_costs(self.cfg, shape, *args)
        base = replace(shape, ep=1, load=1.0)
        if base not in self._shared:
            self._shared[base] = micro_batch_costs(self.cfg, base, *args)
        shared = self._shared[base]
        moe_layer = next(i for i in range(self.cfg.n_layers) if self.cfg.is_moe_layer(i))
        moe = _cost(layer_ops(self.cfg, shape, moe_layer), *args)
        return replace(shared, moe=moe)

    def __len__(self) -> int:
        return len(self._memo)
