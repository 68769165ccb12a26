"""The kernel models of ``hwmodels`` over arrays of kernels: many shapes priced in a few numpy calls.

A search prices thousands of distinct kernels (every GEMM, attention and elementwise kernel of
every per-GPU micro-batch shape); one Python call of ``hwmodels.price`` per kernel dominates its
time. Each function here is the scalar model it names written over numpy arrays, operation for
operation in the same order, so that each element is the same IEEE double the scalar model gives
(``tests/test_bulk.py`` checks them equal on random shapes, devices, dtypes and efficiencies):

- ``gemm_times``: ``gemm.gemm_time(...).scaled(count)`` (tiles, waves, split-K, the power limit's
  clock, the memory floor with the flushed L2's write-back);
- ``attention_times``: ``attention.attention_time`` for the fused kernels (flash forward and
  backward, one-query decode); the math backend goes through the scalar model;
- ``elementwise_times``: ``elementwise.elementwise_time`` (bandwidth, row-reduction latency);
- ``collective_times``: ``collectives.collective_time`` of one host (ring, tree or auto, Simple
  or LL protocol, whichever is faster);
- ``price_ops``: ``price.price`` of any list of operators, grouped by class.

The one transcendental, the boost clock's ``exp`` (``power.clock_factor``, only off a busy
stream), is taken with ``math.exp`` per element, as the scalar model does: numpy's ``exp`` may
round differently in the last place. Everything else is correctly rounded arithmetic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpuplan.hwmodels.attention import (
    COMPOSITE_KERNELS,
    INFERENCE_ONLY,
    attention_time,
    decode_compute_s,
    decode_hbm_fraction,
    kernel_rate,
)
from gpuplan.hwmodels.collectives import ALGORITHMS, link_override_or_default, tree_terms
from gpuplan.hwmodels.elementwise import ROW_REDUCTIONS, kernel_family, row_per_elem_s
from gpuplan.hwmodels.formats import BLOCK_FORMATS
from gpuplan.hwmodels.gemm import (
    ALIGN_BYTES,
    MIN_K_SLICE,
    SIMT_GEMV_MAX_ROWS,
    SIMT_TILES,
    TILES,
    _tile_fixed_s,
    gemm_bytes,
    is_grouped,
    simt_stream_steps_s,
)
from gpuplan.hwmodels.power import SIMT_DTYPES
from gpuplan.hwmodels.price import price
from gpuplan.workloads.dtypes import dtype_bytes
from gpuplan.workloads.ops import Attention, Elementwise, Gemm, Memory


@dataclass(frozen=True, slots=True)
class KernelTimes:
    """``KernelTime`` of many kernels: each field an array, one element per kernel."""

    compute_s: np.ndarray
    memory_s: np.ndarray
    launch_s: np.ndarray

    @property
    def total_s(self) -> np.ndarray:  # as KernelTime.total_s: compute and memory overlap fully
        return np.maximum(self.compute_s, self.memory_s) + self.launch_s

    def __len__(self) -> int:
        return len(self.total_s)


def _floats(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float64)


def throttled(compute_s: np.ndarray, eff, dtype: str) -> np.ndarray:
    """``power.throttled`` of each element (compute time at the clock the power limit allows)."""
    if dtype in SIMT_DTYPES:
        return compute_s / 1.0
    r = eff.sustained_clock_fraction
    busy = compute_s > 0.0
    if eff.steady_state or eff.boost_time_constant_s <= 0.0:
        return compute_s / np.where(busy, r, 1.0)
    tau = eff.boost_time_constant_s
    decay = np.array([1.0 - math.exp(-b / tau) if b > 0.0 else 0.0 for b in compute_s.tolist()])
    safe = np.where(busy, compute_s, 1.0)
    factor = np.where(busy, r + (1.0 - r) * tau / safe * decay, 1.0)
    return compute_s / factor


# --- GEMM (hwmodels.gemm) ---------------------------------------------------------------------


def gemm_times(acc, m, n, k, dtype: str, eff, count=1) -> KernelTimes:
    """``gemm_time(acc, m, n, k, dtype, eff).scaled(count)`` for arrays of one ``dtype``."""
    m, n, k = (np.asarray(x, dtype=np.int64) for x in (m, n, k))
    count = np.broadcast_to(np.asarray(count, dtype=np.int64), m.shape)
    elems = max(1, int(ALIGN_BYTES // dtype_bytes(dtype)))  # gemm.is_aligned
    aligned = (n % elems == 0) & (k % elems == 0)
    tiles = SIMT_TILES if dtype in SIMT_DTYPES else TILES
    compute = _tiled_compute_s(acc, m, n, k, dtype, eff, tiles[0], aligned)
    for tile in tiles[1:]:
        compute = np.minimum(compute, _tiled_compute_s(acc, m, n, k, dtype, eff, tile, aligned))
    compute = throttled(compute, eff, dtype)
    memory = _gemm_memory_s(acc, m, n, k, dtype, eff, aligned)
    if dtype in SIMT_DTYPES:  # gemm._simt_gemv_time where m is small
        gemv = m <= SIMT_GEMV_MAX_ROWS
        compute = np.where(gemv, _simt_gemv_compute_s(acc, m, n, k, dtype, eff), compute)
        memory = np.where(gemv, _gemm_memory_s(acc, m, n, k, dtype, eff, aligned,
                                               fraction=eff.simt_gemv_hbm_fraction), memory)
    launch = np.full(m.shape, eff.gemm_overhead_s)
    return KernelTimes(compute * count, memory * count, launch * count)


def _simt_gemv_compute_s(acc, m, n, k, dtype, eff) -> np.ndarray:
    """``gemm._simt_gemv_time``'s compute of each element."""
    return 2.0 * m * n * k / (acc.peak(dtype) * eff.simt_gemv_fraction)


def _tiled_compute_s(acc, m, n, k, dtype, eff, tile, aligned) -> np.ndarray:
    """``gemm._tiled_compute_s`` of each element (same operations, same order)."""
    tile_m, tile_n = tile
    n_sms = acc.n_sms or 1
    tiles = np.ceil(m / tile_m) * np.ceil(n / tile_n)  # exact integers in float64
    few = tiles < n_sms
    split = np.where(few, np.minimum(np.maximum(k / MIN_K_SLICE, 1.0), n_sms / tiles), 1.0)
    waves = np.ceil(tiles * split / n_sms - 1e-9)
    k_slice = k / split
    rate = {a: acc.peak(dtype) * eff.gemm_fraction(dtype, aligned=a) / n_sms for a in (True, False)}
    per_sm_flops_per_s = np.where(aligned, rate[True], rate[False])
    small = 1.0 + eff.gemm_small_tile_penalty * (tile_m < 128)
    main_loop_s = 2.0 * tile_m * tile_n * k_slice * small / per_sm_flops_per_s
    fixed_s = _tile_fixed_s(acc, tile_m, tile_n, dtype, eff) * small
    if dtype not in SIMT_DTYPES:
        return waves * (main_loop_s + fixed_s)
    stream_s, steps_s = simt_stream_steps_s(acc, dtype, eff, tiles, tile_m, tile_n, k, k_slice,
                                            waves)
    simt_s = np.maximum(np.maximum(waves * main_loop_s, stream_s), steps_s) + waves * fixed_s
    return simt_s + np.where(split > 1.0, eff.simt_split_k_s, 0.0)


def _gemm_memory_s(acc, m, n, k, dtype, eff, aligned, fraction=None) -> np.ndarray:
    """``gemm.gemm_memory_s`` of each element (``fraction``: one share of HBM for all)."""
    moved = gemm_bytes(m, n, k, dtype)  # whole arrays: the same integer arithmetic
    if eff.steady_state or not eff.l2_flushed:
        hbm_bytes = moved + 0.0
    else:  # gemm.flushed_l2_writeback_bytes
        read = (m * k + k * n) * dtype_bytes(dtype)
        hbm_bytes = moved + np.minimum(read, acc.l2_bytes or 0.0)
    if fraction is None:
        fraction = np.where(aligned, eff.gemm_hbm_fraction, eff.gemm_unaligned_hbm_fraction)
    return hbm_bytes / (acc.hbm_bytes_per_s * fraction)


# --- attention (hwmodels.attention) -----------------------------------------------------------


def attention_times(acc, ops: Sequence[Attention], eff) -> KernelTimes:
    """``attention_time(acc, op, eff)`` of each op; the composites of ATen kernels (SDPA's math
    backend, transformers' eager attention) and a kernel with no backward (an error there) go
    through the scalar model."""
    if not ops:
        return _empty()
    tile_q = eff.attn_tile_q
    decode = np.array([op.seq_q < tile_q and op.pass_ == "fwd" for op in ops])
    kernel = [eff.attention_kernel if d else eff.prefill_attention_kernel for d in decode]
    scalar = [
        kn in COMPOSITE_KERNELS or (not d and op.pass_ == "bwd" and kn in INFERENCE_ONLY)
        for op, d, kn in zip(ops, decode, kernel, strict=True)
    ]
    nbytes = _floats([op.bytes for op in ops])
    count = _floats([op.count for op in ops])
    memory = nbytes / (acc.hbm_bytes_per_s * eff.hbm_fraction)
    fixed = (eff.kernel_overhead_s + eff.attn_fixed_s) * count
    compute = np.zeros(len(ops))
    dec = decode & ~np.array(scalar)
    if dec.any():
        frac = _floats([decode_hbm_fraction(acc, op, eff, kn) if d else 1.0
                        for op, d, kn in zip(ops, dec, kernel, strict=True)])  # fmt: skip
        memory = np.where(dec, np.maximum(memory, nbytes / (acc.hbm_bytes_per_s * frac)), memory)
        compute = np.where(dec, _floats([decode_compute_s(acc, op, eff) if d else 0.0
                                         for op, d in zip(ops, dec, strict=True)]), compute)
    flash = ~decode & ~np.array(scalar)
    if flash.any():
        compute = np.where(flash, _flash_compute_s(acc, ops, eff, kernel, flash), compute)
    out = KernelTimes(compute, memory, fixed)
    return _with_scalar(out, ops, scalar, lambda op: attention_time(acc, op, eff))


def _flash_compute_s(acc, ops, eff, kernel, rows) -> np.ndarray:
    """``attention_time``'s compute term of the fused forward/backward kernels in ``rows``."""
    out = np.zeros(len(ops))
    groups: dict[tuple[str, str, str, int], list[int]] = {}
    for i, (op, kn) in enumerate(zip(ops, kernel, strict=True)):
        if rows[i]:
            work = op.dtype if acc.supports(op.dtype) else "bf16"  # attention._dtype
            kn = "flash2" if kn == "flashinfer" else kn
            groups.setdefault((op.pass_, kn, work, op.head_dim), []).append(i)
    for (pass_, kn, work, head_dim), idx in groups.items():
        fraction = eff.attn_bwd_fraction if pass_ == "bwd" else eff.attn_fwd_fraction
        if kn != "flash2":
            fraction *= kernel_rate(eff, kn, pass_, head_dim)
        sel = [ops[i] for i in idx]
        compute = _flash_work(acc, sel, eff) / (acc.peak(work) * fraction)
        out[idx] = throttled(compute, eff, work)
    return out


def _flash_work(acc, ops, eff) -> np.ndarray:
    """``attention._flash_work`` of each op (waves, per-block fixed work, softmax)."""
    batch, heads_q, seq_q = (np.array([getattr(o, f) for o in ops], dtype=np.int64)
                             for f in ("batch", "heads_q", "seq_q"))  # fmt: skip
    blocks = batch * heads_q * np.ceil(seq_q / eff.attn_tile_q)
    n_sms = acc.n_sms or 1
    wave_factor = np.ceil(blocks / n_sms) * n_sms / blocks
    keys = _floats([o.mean_keys_per_query for o in ops])
    kv_overhead = _floats([eff.attn_bwd_kv_overhead if o.pass_ == "bwd" else eff.attn_kv_overhead
                           for o in ops])  # fmt: skip
    block_factor = (keys + kv_overhead) / keys
    d = _floats([(o.head_dim + o.v_head_dim) / 2 for o in ops])
    softmax_factor = (d + eff.attn_softmax_head_dim) / d
    flops = _floats([o.flops for o in ops])
    return flops * wave_factor * block_factor * softmax_factor


# --- bandwidth-bound kernels (hwmodels.elementwise) -------------------------------------------


def elementwise_times(acc, ops: Sequence[Elementwise | Memory], eff) -> KernelTimes:
    """``elementwise_time(acc, op, eff)`` of each op."""
    if not ops:
        return _empty()
    nbytes = _floats([op.bytes for op in ops])
    fraction = _floats(
        [eff.elementwise_fraction(kernel_family(op), getattr(op, "pass_", "fwd")) for op in ops]
    )
    memory = nbytes / (acc.hbm_bytes_per_s * fraction)
    rows = [isinstance(op, Elementwise) and op.op in ROW_REDUCTIONS and op.pass_ == "fwd"
            for op in ops]  # fmt: skip
    if any(rows) and acc.n_sms:
        memory = np.maximum(memory, _row_reduction_s(acc, ops, eff, rows))
    kernels = _floats([op.kernels if isinstance(op, Elementwise) else op.count for op in ops])
    zero = nbytes == 0  # no kernel runs (the backward of an add): elementwise.ZERO
    launch = eff.kernel_overhead_s * kernels
    return KernelTimes(np.zeros(len(ops)), np.where(zero, 0.0, memory), np.where(zero, 0.0, launch))


def _row_reduction_s(acc, ops, eff, rows) -> np.ndarray:
    """``elementwise.row_reduction_s`` where ``rows``, else 0."""
    table = eff.row_reduction_s_per_elem
    concurrent = acc.n_sms * eff.reduction_rows_per_sm
    tokens, hidden, count = (np.array([getattr(o, f) if r else 0 for o, r in zip(ops, rows, strict=True)],
                                      dtype=np.int64) for f in ("tokens", "hidden", "count"))  # fmt: skip
    per_elem = _floats([row_per_elem_s(table, o) if r else 0.0
                        for o, r in zip(ops, rows, strict=True)])  # fmt: skip
    waves = np.ceil(tokens / concurrent)
    return np.where(rows, waves * hidden * per_elem * count, 0.0)


# --- collectives of one host (hwmodels.collectives) -------------------------------------------


def collective_times(acc, op: str, world, bytes_per_rank, eff, *,
                     link_bytes_per_s_override: float | None = None,
                     algorithm: str = "ring") -> KernelTimes:  # fmt: skip
    """``collective_time(acc, op, world, bytes_per_rank, eff, ...)`` for arrays of ``world``
    (at least 1) and bytes."""
    world = np.asarray(world, dtype=np.int64)
    nbytes = np.broadcast_to(_floats(bytes_per_rank), world.shape)
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm={algorithm!r}: choose one of {', '.join(ALGORITHMS)}")
    link = link_override_or_default(acc, link_bytes_per_s_override)
    alone = world <= 1  # one rank: nobody to talk to, no time (collectives.ZERO)
    world = np.where(alone, 2, world)
    options = [_ring_terms(op, world, nbytes)]
    if op == "all_reduce" and algorithm != "ring":
        steps = np.array([tree_terms(w, 0.0)[0] for w in world.ravel().tolist()])
        tree = (steps.reshape(world.shape), 2.0 * nbytes)
        options = [tree] + (options if algorithm == "auto" else [])
    launch_s = eff.collective_launch_s + (eff.p2p_launch_s if op == "send_recv" else 0.0)
    op_factor = eff.collective_op_bw_factor.get(op, 1.0)
    best = None
    for steps, sent in options:
        for fraction, step_s in (
            (eff.collective_bw_fraction, eff.collective_latency_s),
            (eff.collective_ll_bw_fraction, eff.collective_ll_latency_s),
        ):
            t = KernelTimes(np.zeros(world.shape), sent / (link * fraction * op_factor),
                            launch_s + steps * step_s)  # fmt: skip
            best = t if best is None else _faster(best, t)
    return KernelTimes(*(np.where(alone, 0.0, getattr(best, f)) for f in KernelTimes.__slots__))


def _ring_terms(op: str, n, nbytes):
    """``collectives.ring_terms`` for arrays."""
    table = {
        "all_reduce": lambda: (2 * (n - 1), 2.0 * (n - 1) / n * nbytes),
        "all_gather": lambda: (n - 1, (n - 1) * nbytes),
        "reduce_scatter": lambda: (n - 1, (n - 1) / n * nbytes),
        "all_to_all": lambda: (np.ones_like(n), (n - 1) / n * nbytes),
        "send_recv": lambda: (np.ones_like(n), nbytes + 0.0),
    }
    if op not in table:
        raise ValueError(f"collective op={op!r}: choose one of {', '.join(table)}")
    return table[op]()


def _faster(a: KernelTimes, b: KernelTimes) -> KernelTimes:
    """Element by element the first of ``a``, ``b`` with the least total (``min(key=total_s)``)."""
    take_b = b.total_s < a.total_s
    return KernelTimes(*(np.where(take_b, getattr(b, f), getattr(a, f))
                         for f in KernelTimes.__slots__))  # fmt: skip


# --- any operator (hwmodels.price) ------------------------------------------------------------


def price_ops(ops: Sequence, acc, eff) -> KernelTimes:
    """``price(op, acc, eff)`` of each op, one array call per kernel class (and GEMM dtype)."""
    compute, memory, launch = (np.zeros(len(ops)) for _ in range(3))
    groups: dict[object, list[int]] = {}
    for i, op in enumerate(ops):
        if isinstance(op, Gemm) and is_grouped(op):
            key = "scalar"  # a grouped GEMM: a few per step, priced by the scalar model
        elif isinstance(op, Gemm) and op.dtype in BLOCK_FORMATS:
            key = "scalar"  # block-scaled: the scalar model's fp8 tiles at the format's rate
        elif isinstance(op, Gemm):
            key = ("gemm", op.dtype)
        elif isinstance(op, Attention):
            key = "attention"
        elif isinstance(op, Elementwise | Memory):
            key = "elementwise"
        else:
            key = "scalar"  # collectives: a handful per step, priced as the scalar model does
        groups.setdefault(key, []).append(i)
    for key, idx in groups.items():
        sel = [ops[i] for i in idx]
        if key == "attention":
            t = attention_times(acc, sel, eff)
        elif key == "elementwise":
            t = elementwise_times(acc, sel, eff)
        elif key == "scalar":
            t = _scalar(sel, lambda op: price(op, acc, eff))  # collectives, grouped GEMMs
        else:
            t = gemm_times(acc, [o.m for o in sel], [o.n for o in sel], [o.k for o in sel],
                           key[1], eff, [o.count for o in sel])  # fmt: skip
        compute[idx], memory[idx], launch[idx] = t.compute_s, t.memory_s, t.launch_s
    return KernelTimes(compute, memory, launch)


def _empty() -> KernelTimes:
    return KernelTimes(np.zeros(0), np.zeros(0), np.zeros(0))


def _scalar(ops, fn) -> KernelTimes:
    kts = [fn(op) for op in ops]
    return KernelTimes(*(_floats([getattr(kt, f) for kt in kts]) for f in KernelTimes.__slots__))


def _with_scalar(out: KernelTimes, ops, scalar, fn) -> KernelTimes:
    """``out`` with the rows marked ``scalar`` priced by the scalar model ``fn`` instead."""
    idx = [i for i, s in enumerate(scalar) if s]
    if not idx:
        return out
    t = _scalar([ops[i] for i in idx], fn)
    fields = [getattr(out, f).copy() for f in KernelTimes.__slots__]
    for arr, part in zip(fields, (t.compute_s, t.memory_s, t.launch_s), strict=True):
        arr[idx] = part
    return KernelTimes(*fields)
