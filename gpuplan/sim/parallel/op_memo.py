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
from itertools import chain

import numpy as np

from gpuplan.hwmodels.bulk import price_ops
from gpuplan.hwmodels.price import host_calls
from gpuplan.sim.estimate.breakdown import Item
from gpuplan.sim.estimate.composite import _as_run, layer_groups
from gpuplan.sim.parallel.fp8 import fp8_cast_ops
from gpuplan.sim.parallel.kernel_costs import Cost, MicroBatchCosts, _cost, _priced, cost_of
from gpuplan.sim.parallel.kernel_lists import (
    CORE,
    _experts,
    embedding_ops,
    head_ops,
    layer_forward_ops,
    layer_ops,
)
from gpuplan.sim.parallel.shape import Shape
from gpuplan.sim.parallel.stage import SAC_GEMM_FRACTION
from gpuplan.workloads.operators import backward_of, layer_forward
from gpuplan.workloads.ops import op_class

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
        return _priced(ops, self.acc, self.eff, phase, self._kernels)

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
        """``kernel_costs._cost(layer_ops(cfg, shape, layer), ...)``, from the per-kernel memo."""
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
        return cost_of(tuple(fwd_items), tuple(bwd_items), self.eff)

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


# --- bulk: every shape's kernels numbered, priced in a few array calls --------------------------

KIND_GEMM, KIND_ATTENTION, KIND_VIEW, KIND_OTHER = 0, 1, 2, 3


class KernelTable:
    """The distinct kernels of a search, numbered as first met and priced in bulk
    (``hwmodels.bulk.price_ops``): per kernel its time, class and torch calls, as the item
    ``breakdown.priced_items`` makes of it holds them (a kernel that item drops, no time and no
    call, adds zeros here)."""

    def __init__(self, acc, eff) -> None:
        self.acc, self.eff = acc, eff
        self._ids: dict = {}
        self._pending: list = []
        self.time_s = np.zeros(0)
        self.kind = np.zeros(0, dtype=np.int8)
        self.core = np.zeros(0, dtype=bool)
        self.host_calls = np.zeros(0, dtype=np.int64)

    def ids(self, ops) -> tuple[int, ...]:
        """The numbers of ``ops``, new ones queued for the next ``price_pending``."""
        out = []
        for op in ops:
            i = self._ids.get(op)
            if i is None:
                i = self._ids[op] = len(self._ids)
                self._pending.append(op)
            out.append(i)
        return tuple(out)

    def price_pending(self) -> None:
        ops, self._pending = self._pending, []
        if not ops:
            return
        kinds = {"gemm": KIND_GEMM, "attention": KIND_ATTENTION, "view": KIND_VIEW}
        new = {
            "time_s": price_ops(ops, self.acc, self.eff).total_s,
            "kind": np.array([kinds.get(op_class(op), KIND_OTHER) for op in ops], dtype=np.int8),
            "core": np.array([op.name.startswith(CORE) for op in ops], dtype=bool),
            "host_calls": np.array([host_calls(op) for op in ops], dtype=np.int64),
        }
        for f, v in new.items():
            setattr(self, f, np.concatenate([getattr(self, f), v]))

    def __len__(self) -> int:
        return len(self._ids)


Part = tuple[tuple[int, ...], tuple[int, ...]]  # (forward kernel numbers, backward), in order


class ShapeKernels:
    """Each shape's kernels as numbers of a ``KernelTable``: the same kernels in the same order
    as ``micro_batch_costs`` (``OpMemoCosts`` for ``fused``/``eager``, ``CostCache`` for
    ``compiled``) gives items, so the sums over them are the same floats."""

    def __init__(self, cfg, impl: str, table: KernelTable) -> None:
        self.cfg, self.impl, self.table = cfg, impl, table
        self._ops: dict = {}  # forward kernel -> (run, bwd, cast fwd, cast bwd) numbers
        self._extra: dict = {}
        self._base: dict = {}
        self._refs: dict = {}  # (shape, block) -> its kernels (an MoE block's at ep=1, load=1)
        self._base_ids: dict = {}  # _base key -> {id(op): numbers} of that list's ops
        self._moving: dict = {}  # (shape, block) -> positions of its expert kernels
        self._experts: dict = {}  # (expert kernel at ep=1, ep, load) -> numbers at that ep
        self._shared: dict = {}  # by shape at ep=1, load=1: dense, head, embedding parts
        groups = layer_groups(cfg)
        self._dense = [layer for layer, _ in groups if not cfg.is_moe_layer(layer)]
        self._moe = [layer for layer, _ in groups if cfg.is_moe_layer(layer)]

    def parts(self, shape: Shape) -> tuple[Part | None, Part | None, Part, Part]:
        """(dense block, MoE block, LM head, embedding) of ``shape``."""
        base = replace(shape, ep=1, load=1.0) if self.cfg.is_moe else shape
        shared = self._shared.get(base)
        if shared is None:
            dense = self._block(base, self._dense[-1]) if self._dense else None
            shared = (dense, self._listed(head_ops(self.cfg, base)),
                      self._listed(embedding_ops(self.cfg, base)))  # fmt: skip
            self._shared[base] = shared
        moe = None
        if self._moe:
            if self.impl in PER_OP_IMPLS or shape == base:
                moe = self._block(shape, self._moe[-1])
            else:  # CostCache's compiled path re-prices the first MoE block at its ep and load
                moe = self._block(shape, next(i for i in range(self.cfg.n_layers)
                                              if self.cfg.is_moe_layer(i)))  # fmt: skip
        return shared[0], moe, shared[1], shared[2]

    def _listed(self, ops) -> Part:
        """``kernel_costs._cost``'s kernels of a (forward, backward) list."""
        fwd, bwd = (_as_run(o, self.impl) for o in ops)
        cast_fwd, cast_bwd = fp8_cast_ops(ops[0], self.impl)
        return self.table.ids(fwd + cast_fwd), self.table.ids(bwd + cast_bwd)

    def _block(self, shape: Shape, layer: int) -> Part:
        if self.impl not in PER_OP_IMPLS:  # compiled fuses runs of ops: list-wise
            return self._listed(layer_ops(self.cfg, shape, layer))
        moe = self.cfg.is_moe_layer(layer)
        ref = replace(shape, ep=1, load=1.0) if moe else shape
        fwd, per_op, extra_ids = self._reference(ref, layer)
        if moe and (shape.ep != 1 or shape.load != 1.0):
            # ep and the load change only the expert kernels (``kernel_lists._experts``, a map op by
            # op that the other steps of ``layer_forward_ops`` leave alone): re-number those
            moving = self._moving.get((ref, layer))
            if moving is None:  # the ops _experts replaces (by name and class, whatever ep)
                moving = self._moving[(ref, layer)] = [
                    i for i, (old, new) in enumerate(zip(fwd, _experts(fwd, shape), strict=True))
                    if new is not old
                ]  # fmt: skip
            per_op = list(per_op)
            for i in moving:
                per_op[i] = self._expert_ids(fwd[i], shape)
        fwd_ids = [i for p in per_op for i in p[0]] + [i for p in per_op for i in p[2]]
        bwd_ids = [i for p in reversed(per_op) for i in p[1]] + extra_ids
        bwd_ids += [i for p in per_op for i in p[3]]
        return tuple(fwd_ids), tuple(bwd_ids)

    def _expert_ids(self, op, shape: Shape) -> tuple:
        """``_op_ids`` of expert kernel ``op`` as ``shape``'s ep and load make it."""
        key = (op, shape.ep, shape.load)
        got = self._experts.get(key)
        if got is None:
            got = self._experts[key] = self._op_ids(_experts([op], shape)[0])
        return got

    def _reference(self, shape: Shape, layer: int) -> tuple:
        """(forward kernels, their numbers op by op, the extra backward's numbers) of block
        ``layer`` at ``shape`` (for an MoE block: at ep=1, load=1)."""
        got = self._refs.get((shape, layer))
        if got is None:
            key = (shape.micro_batch, shape.seq // shape.cp, layer, shape.tp)
            base = self._base.get(key)
            if base is None:
                base = self._base[key] = layer_forward(
                    self.cfg, batch=key[0], seq=key[1], layer=layer, tp=shape.tp
                )  # fmt: skip
                # the numbers of the list's own ops by identity: they stay alive in _base, and
                # the steps of layer_forward_ops pass the ops they leave alone through as is
                self._base_ids[key] = {id(op): self._op_ids(op) for op in base}
            fwd, extra_bwd = layer_forward_ops(self.cfg, shape, layer, base)
            known = self._base_ids[key]
            extra_ids: list[int] = []
            for op in extra_bwd:
                extra = self._extra.get(op)
                if extra is None:
                    extra = self._extra[op] = self.table.ids(_as_run([op], self.impl))
                extra_ids += extra
            per_op = [known.get(id(op)) or self._op_ids(op) for op in fwd]
            got = self._refs[(shape, layer)] = (fwd, per_op, extra_ids)
        return got

    def _op_ids(self, op) -> tuple:
        got = self._ops.get(op)
        if got is None:
            one = [op]
            cast_fwd, cast_bwd = fp8_cast_ops(one, self.impl)
            got = self._ops[op] = (
                self.table.ids(_as_run(one, self.impl)),
                self.table.ids(_as_run(backward_of(one), self.impl)),
                self.table.ids(cast_fwd),
                self.table.ids(cast_bwd),
            )
        return got


def shape_time_table(parts: list, table: KernelTable, eff) -> dict[str, np.ndarray]:
    """``stage.shape_times`` of many shapes (``ShapeKernels.parts`` each) as arrays: every sum
    taken with ``np.bincount``, which adds each shape's terms one after another in their order,
    as ``shape_times``'s loops do, so each element is the same double."""
    n = len(parts)
    table.price_pending()
    dense, moe, head, emb = (_Sums([p[j] for p in parts], table, n) for j in range(4))
    layer = _Sums([p[0] if p[0] is not None else p[1] for p in parts], table, n)
    return {
        "dense_fwd": dense.fwd,
        "dense_bwd": dense.bwd,
        "moe_fwd": moe.fwd,
        "moe_bwd": moe.bwd,
        "dense_core": dense.fwd_core,
        "moe_core": moe.fwd_core,
        "head_fwd": head.fwd,
        "head_bwd": head.bwd,
        "emb_fwd": emb.fwd,
        "emb_bwd": emb.bwd,
        "gemm_layer": layer.gemm,
        "attn_layer": layer.attention + layer.core,
        "host_dense": dense.host_s(eff),
        "host_moe": moe.host_s(eff),
        "host_head": head.host_s(eff),
        "host_emb": emb.host_s(eff),
        "dense_sac": dense.sac,
        "moe_sac": moe.sac,
    }


class _Sums:
    """``stage._block_sums`` and ``Cost.host_s`` of one part of many shapes, as arrays."""

    def __init__(self, parts: list, table: KernelTable, n: int) -> None:
        self.present = np.array([p is not None for p in parts], dtype=bool)
        fwd = [p[0] if p is not None else () for p in parts]
        bwd = [p[1] if p is not None else () for p in parts]
        fi, bi = (np.fromiter(chain.from_iterable(x), np.int64) for x in (fwd, bwd))
        fb, bb = (
            np.repeat(np.arange(n), np.fromiter(map(len, x), np.int64, n)) for x in (fwd, bwd)
        )
        # every forward term, then every backward term: in each shape's bin the forward's come
        # first, each list in its order, as ``_block_sums`` adds them
        ai, ab = np.concatenate([fi, bi]), np.concatenate([fb, bb])
        t, kind = table.time_s, table.kind

        def total(bins, weights):  # a term left out adds +0.0, which changes no sum
            return np.bincount(bins, weights=weights, minlength=n)

        self.fwd = total(fb, t[fi])
        self.bwd = total(bb, t[bi])
        self.fwd_core = total(fb, np.where(table.core[fi], t[fi], 0.0))
        self.core = total(ab, np.where(table.core[ai], t[ai], 0.0))
        self.gemm = total(ab, np.where(kind[ai] == KIND_GEMM, t[ai], 0.0))
        self.attention = total(ab, np.where(kind[ai] == KIND_ATTENTION, t[ai], 0.0))
        # op-level selective recomputation: half of each GEMM, all but attention and views
        share = np.select([kind[fi] == KIND_GEMM, kind[fi] == KIND_OTHER],
                          [SAC_GEMM_FRACTION, 1.0], 0.0)  # fmt: skip
        self.sac = total(fb, t[fi] * share)
        # torch calls are whole numbers: their float sums are exact
        self.calls = total(ab, table.host_calls[ai].astype(float)).astype(np.int64)
        self.bwd_calls = total(bb, table.host_calls[bi].astype(float)).astype(np.int64)

    def host_s(self, eff) -> np.ndarray:
        """``Cost.host_s``: calls x launch + backward calls x the autograd engine's share."""
        host = self.calls * eff.host_launch_s + self.bwd_calls * eff.autograd_op_s
        return np.where(self.present, host, 0.0)
