"""A search's kernel shapes priced in bulk: the distinct (micro-batch, tp, cp, sp, ep, precision)
shapes of its strategies, each shape's kernels listed as numbers of one table of distinct kernels
(``op_memo.ShapeKernels``), priced in pieces of ``SHAPE_CHUNK`` shapes merged in order (so the
same wherever the pieces run, ``sim.sweep``), and every shape's times as arrays.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from gpuplan.sim.parallel.fp8 import PRECISION_CODES
from gpuplan.sim.parallel.op_memo import KernelTable, ShapeKernels, shape_time_table
from gpuplan.sim.parallel.shape import Shape, stack_shape_fields
from gpuplan.sim.parallel.space import SearchSpace
from gpuplan.sim.parallel.stage import TIME_FIELDS
from gpuplan.sim.stacks import get_stack
from gpuplan.sim.sweep import chunks

SHAPE_CHUNK = 128  # kernel shapes priced per piece of work (each piece has its cache's copy)


def price_shapes(cfg, s: dict, seq: int, acc, eff, space: SearchSpace, pool, progress):
    """Index of each strategy's shape and the shapes' times as arrays (priced in pieces of
    ``SHAPE_CHUNK`` shapes, merged in order: the same wherever the pieces run)."""
    keys = np.stack([s["mb"], s["tp"], s["cp"], s["sp"], s["ep"], s["fp8"]], axis=1)
    uniq, index = unique_rows(keys)
    # one table of kernels for every piece: run here, the pieces share the kernels they price
    # (a worker elsewhere gets a copy; the numbers are the same either way)
    kernels = ShapeKernels(cfg, get_stack(space.stack).elementwise, KernelTable(acc, eff))
    price = partial(_price_piece, kernels, seq, space)
    pieces = [uniq[sl] for sl in chunks(len(uniq), SHAPE_CHUNK)]
    parts = pool.map(price, progress(pieces, "pricing kernel shapes", pool))
    table = {f: np.concatenate([part[f] for part in parts]) for f in TIME_FIELDS}
    return index.ravel(), table, len(uniq)


def unique_rows(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, axis=0, return_inverse=True)`` of non-negative integer rows, as one
    int64 sort of a mixed-radix number (a row-wise unique is several times slower)."""
    keys = keys.astype(np.int64)
    bases = keys.max(axis=0) + 1
    if float(np.prod(bases.astype(float))) >= 2.0**62:
        uniq, index = np.unique(keys, axis=0, return_inverse=True)
        return uniq, index.ravel()
    number = np.zeros(len(keys), dtype=np.int64)
    for col, base in zip(keys.T, bases, strict=True):
        number = number * int(base) + col
    _numbers, first, index = np.unique(number, return_index=True, return_inverse=True)
    return keys[first], index.ravel()


def _price_piece(kernels: ShapeKernels, seq: int, space: SearchSpace, shapes: np.ndarray) -> dict:
    """Times of ``shapes`` (rows of micro-batch, tp, cp, sp, ep, fp8): one piece of a sweep.
    Each shape's kernels are listed as numbers, the new ones priced in a few array calls
    (``hwmodels.bulk``), and the per-shape sums taken at once (``op_memo.shape_time_table``)."""
    cfg = kernels.cfg
    stack = get_stack(space.stack)
    parts = []
    for mb, tp, cp, sp, ep, fp8 in shapes.tolist():
        precision = PRECISION_CODES[int(fp8)]  # the recipe's code (sim.parallel.fp8)
        shape = Shape(
            micro_batch=int(mb),
            seq=seq,
            tp=int(tp),
            cp=int(cp),
            sp=bool(sp),
            ep=int(ep) if cfg.is_moe else 1,
            load=space.load if cfg.is_moe else 1.0,
            precision=precision,
            attention=space.attention,
            **stack_shape_fields(stack, precision, cfg.is_moe),
        )
        parts.append(kernels.parts(shape))
    return shape_time_table(parts, kernels.table, kernels.table.eff)
