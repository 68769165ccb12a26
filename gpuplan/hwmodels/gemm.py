"""GEMM time: tile and wave quantization over the SMs, a per-dtype achievable rate, and a memory floor.

Model (after the wave-quantization account of NVIDIA's "Matrix Multiplication Background User's
Guide", and LLMCompass, Zhang et al. ISCA 2024, sec. 4):
- The output m x n is cut into tiles of ``tile_m x tile_n``; one SM computes one tile at a time,
  so the tiles run in ``ceil(tiles / n_sms)`` waves and the last wave may leave SMs idle.
- When there are fewer tiles than SMs, the library splits k (split-K) so that idle SMs share the
  reduction; the split is bounded so each slice keeps at least ``MIN_K_SLICE`` of k.
- A tile costs ``2 * tile_m * tile_n * k_slice`` FLOPs at the achievable per-SM rate of its
  dtype, plus a fixed time for the prologue (pipeline fill) and the epilogue (writing C), which
  do not shrink with k: ``k_overhead`` k-steps of a 16-bit tensor-core tile, whatever the dtype.
- Tiles: the tensor-core dtypes (bf16, fp16, tf32, fp8, int8) use Hopper's wgmma tiles, 64 rows
  or more; fp32 without TF32 uses CUDA-core (SIMT) tiles, down to 32 rows.
- SIMT fp32 (cuBLAS's sm80 ``xmma_gemm_f32f32..._ffma`` kernels, which PyTorch runs for fp32 with
  TF32 off, its default, and once per group for ``torch._grouped_mm``'s fp32 fallback): the tiles'
  FMAs, as above, or, where slower, the stream of every tile's two operand panels (``(tile_m +
  tile_n) * k`` elements a tile) through ordinary loads and a three-stage pipeline of k = 8 steps,
  which reach only ``simt_tile_hbm_fraction`` of HBM bandwidth (a narrow tile is bound by it, a
  128-wide one by its FMAs), or the steps themselves, ``simt_k_step_s`` each (a small GEMM's
  floor: a step waits on its loads); a split-K call adds a second pass (``simt_split_k_s``:
  cuBLAS's split-K reduce kernel, or a memset of C before the slices accumulate). At
  ``SIMT_GEMV_MAX_ROWS`` rows or fewer cuBLAS runs a GEMV kernel (``gemv2T``,
  ``gemmSN_TN_kernel``) instead: the m rows' FMAs at ``simt_gemv_fraction`` of the fp32 peak, no
  tile to pad, and the weights at ``simt_gemv_hbm_fraction`` of HBM bandwidth.
- The library picks the tile shape that runs fastest, as cuBLAS's heuristics try to.
- Memory: every operand read once and the output written once, at the GEMV-reachable HBM rate.
  This is the regime of small m (decode), where a GEMM is a bandwidth-bound GEMV. Timed alone
  after an L2 flush, a GEMM also writes back the dirty lines the flush left in the L2.
- Alignment: cuBLAS's fast Hopper kernels need the leading dimensions (k of A, n of B and C in
  row-major terms) to be multiples of 16 bytes; otherwise it falls back to slower kernels, with
  their own achievable rate and bandwidth (fitted).
- Clock: the achievable rates are at boost clock; ``hwmodels.power`` lowers them under a long
  or continuous load (the power limit).
- ``KernelTime.total_s`` overlaps the two and adds the fixed per-kernel overhead of a library
  GEMM (kernel selection, launch, prologue), which is larger than a plain kernel's.
"""

from __future__ import annotations

import math

from gpuplan.hwmodels.efficiency import Efficiency
from gpuplan.hwmodels.formats import BLOCK_FORMATS, block_format, check_format
from gpuplan.hwmodels.kernel_time import KernelTime
from gpuplan.hwmodels.power import SIMT_DTYPES, throttled
from gpuplan.workloads.dtypes import dtype_bytes

# split-K never cuts k below this many elements per slice. Assumption, named: a slice must
# cover a few of the k=64 tile steps of a Hopper GEMM main loop to amortize its prologue and
# the partial-sum reduction (CUTLASS 3 sm90 kernels step k by 64 for 16-bit inputs).
MIN_K_SLICE = 256
# Candidate tiles (tile_m, tile_n): Hopper cuBLAS/CUTLASS kernels use 128x256, 128x128 and
# 64x128 CTA tiles for 16- and 8-bit inputs (CUTLASS 3 sm90 profiler kernel names).
TILES = ((128, 256), (128, 128), (64, 128))
# fp32 without TF32 runs on CUDA-core (SIMT) kernels, not bound to wgmma's 64-row minimum: the
# tiles (tile_m, tile_n) of the sm80 xmma SIMT kernels cuBLAS ran for fp32 mm on the H200
# (``sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize{M}x{N}x8_stage3_..._ffma`` in the stats of
# data/h200_stacks/run4/grouped.jsonl), with CUTLASS's SIMT sgemm tiles beside them (CUTLASS
# tools/library/scripts/generator.py, GenerateSM50_Simt: 128x128, 128x64, 64x128, 64x64, 128x32,
# 32x128).
SIMT_TILES = ((256, 128), (256, 64), (128, 128), (128, 64), (64, 256), (64, 128), (64, 64),
              (128, 32), (32, 128), (32, 64), (32, 32))
SIMT_K_STEP = 8  # k elements a main-loop step of those kernels loads (tilesize MxNx8)
# cuBLAS ran GEMV kernels for fp32 mm of 1 row (gemv2T) and 4 rows (gemmSN_TN_kernel) and tiles
# from 16 rows (kernel names in data/h200_stacks run4/grouped.jsonl and run9/sgemm.jsonl; 8 rows
# unobserved): GEMV at 4 rows or fewer
SIMT_GEMV_MAX_ROWS = 4
OUT_DTYPE = {"fp8": "bf16", "int8": "fp32"}  # _scaled_mm writes bf16; _int_mm writes int32


ALIGN_BYTES = 16  # cuBLAS: leading dimensions a multiple of 16 bytes for the fast paths


def is_aligned(n: int, k: int, dtype: str) -> bool:
    """Whether the leading dimensions (k of A, n of B and C) are 16-byte multiples."""
    elems = max(1, int(ALIGN_BYTES // dtype_bytes(dtype)))
    return n % elems == 0 and k % elems == 0


def gemm_time(acc, m: int, n: int, k: int, dtype: str, eff: Efficiency) -> KernelTime:
    """Time of C[m, n] = A[m, k] @ B[k, n] in ``dtype`` on accelerator ``acc``."""
    if dtype in BLOCK_FORMATS:
        return block_scaled_gemm_time(acc, m, n, k, dtype, eff)
    aligned = is_aligned(n, k, dtype)
    if dtype in SIMT_DTYPES and m <= SIMT_GEMV_MAX_ROWS:
        return _simt_gemv_time(acc, m, n, k, dtype, eff)
    tiles = SIMT_TILES if dtype in SIMT_DTYPES else TILES
    compute_s = min(_tiled_compute_s(acc, m, n, k, dtype, eff, t, aligned) for t in tiles)
    compute_s = throttled(compute_s, eff, dtype)  # the clock the power limit allows
    memory_s = gemm_memory_s(acc, m, n, k, dtype, eff, aligned=aligned)
    return KernelTime(compute_s, memory_s, eff.gemm_overhead_s)


def block_scaled_gemm_time(acc, m, n, k, dtype: str, eff: Efficiency) -> KernelTime:
    """Both operands in a block-scaled format (``hwmodels.formats``): the fp8 model's tiles at the
    device's rate for the format (its catalogue peak over the fp8 one: Blackwell's FP4 2x or
    2.9x, MXFP8 1x), its memory term scaled to the format's bytes (scales included) and a bf16
    output. No fitted rate of its own: the fp8 GEMM's share of peak stands for it. A device
    without the format's tensor-core path is a one-line error (``formats.check_format``)."""
    check_format(acc, dtype)
    fmt = block_format(dtype)
    base = gemm_time(acc, m, n, k, "fp8", eff)
    moved = fmt.tensor_bytes(m * k) + fmt.tensor_bytes(k * n) + m * n * dtype_bytes("bf16")
    fp8_moved = (m * k + k * n) * dtype_bytes("fp8") + m * n * dtype_bytes("bf16")
    return KernelTime(base.compute_s * acc.peak("fp8") / acc.peak(fmt.rate_dtype),
                      base.memory_s * moved / fp8_moved, base.launch_s)  # fmt: skip


def _simt_gemv_time(acc, m, n, k, dtype, eff: Efficiency) -> KernelTime:
    """cuBLAS's fp32 GEMV kernel: the m rows' FMAs at ``simt_gemv_fraction`` of the peak (no
    tile to pad), the operands at ``simt_gemv_hbm_fraction`` of HBM bandwidth."""
    compute_s = gemm_flops(m, n, k) / (acc.peak(dtype) * eff.simt_gemv_fraction)
    hbm_bytes = gemm_bytes(m, n, k, dtype) + flushed_l2_writeback_bytes(acc, m, n, k, dtype, eff)
    memory_s = hbm_bytes / (acc.hbm_bytes_per_s * eff.simt_gemv_hbm_fraction)
    return KernelTime(compute_s, memory_s, eff.gemm_overhead_s)


# torch._grouped_mm's CUDA path is CUTLASS for bf16 only (ATen native/cuda/GroupedBlas.cpp);
# other dtypes take ``_grouped_mm_fallback`` (native/GroupedMMUtils.h), one ``mm`` per group.
GROUPED_CUTLASS_DTYPES = ("bf16",)


def grouped_gemm_time(acc, groups: int, m: int, n: int, k: int, dtype: str,
                      eff: Efficiency) -> KernelTime:
    """``groups`` products C_g[m, n] = A_g[m, k] B_g[k, n] in one ``torch._grouped_mm`` call.

    bf16 runs one CUTLASS kernel over every group's tiles, priced on the groups' aggregate work:
    their FLOPs at ``grouped_gemm_fraction`` of the dense peak, their bytes (each group's
    weights, rows in and rows out) at ``grouped_gemm_hbm_fraction`` of HBM bandwidth, one
    launch. On the H200 the kernel streams the weights at about 3 TB/s whatever the group count
    and reaches 650-780 TFLOP/s once a group has 256 rows or more (data/h200_stacks/run4/
    grouped.jsonl), where cuBLAS would run each expert's small GEMM apart. Other dtypes are the
    fallback's per-group GEMMs, and once per call its copy of the group offsets to the host
    (``grouped_fallback_s`` of device time: a ``Memcpy DtoH`` in the records' kernels)."""
    if dtype not in GROUPED_CUTLASS_DTYPES:
        per_group = gemm_time(acc, m, n, k, dtype, eff).scaled(groups)
        return KernelTime(per_group.compute_s, per_group.memory_s,
                          per_group.launch_s + eff.grouped_fallback_s)
    flops = 2.0 * groups * m * n * k
    compute_s = throttled(flops / (acc.peak(dtype) * eff.grouped_gemm_fraction), eff, dtype)
    nbytes = groups * gemm_bytes(m, n, k, dtype)
    memory_s = nbytes / (acc.hbm_bytes_per_s * eff.grouped_gemm_hbm_fraction)
    return KernelTime(compute_s, memory_s, eff.gemm_overhead_s)


def is_grouped(op) -> bool:
    """A GEMM op that runs its ``count`` problems as one grouped call (``launches == 1``)."""
    return getattr(op, "launches", None) == 1 and op.count > 1


def gemm_bytes(m: int, n: int, k: int, dtype: str) -> float:
    """Fewest bytes a GEMM moves: A and B read once, C written once."""
    out = OUT_DTYPE.get(dtype, dtype)
    return (m * k + k * n) * dtype_bytes(dtype) + m * n * dtype_bytes(out)


def gemm_memory_s(
    acc, m: int, n: int, k: int, dtype: str, eff: Efficiency, *, aligned: bool = True
) -> float:
    fraction = eff.gemm_hbm_fraction if aligned else eff.gemm_unaligned_hbm_fraction
    hbm_bytes = gemm_bytes(m, n, k, dtype) + flushed_l2_writeback_bytes(acc, m, n, k, dtype, eff)
    return hbm_bytes / (acc.hbm_bytes_per_s * fraction)


def flushed_l2_writeback_bytes(acc, m: int, n: int, k: int, dtype: str, eff: Efficiency) -> float:
    """Dirty L2 lines a GEMM timed alone after an L2 flush writes back to HBM.

    The flush is a write (zeroing a 256 MB buffer, docs/dev/campaign.md), so it leaves the
    write-back L2 full of dirty lines; each line the GEMM reads evicts one, which goes back to
    HBM first, until the L2's worth is gone. The H200 campaign shows it: m = 1 GEMVs take
    19, 42, 72 and 242 us for 34, 117, 235 and 940 MB of bf16 weights (fp8: 12, 28, 41 and 124 us
    for 17, 59, 118 and 470 MB), one line of 4.2 TB/s over the weights plus min(weights, L2)
    and the fixed overhead, not one rate. In a busy stream (``eff.steady_state``) the L2 holds
    the previous kernels' small outputs, and nothing of the kind is paid."""
    if eff.steady_state or not eff.l2_flushed:
        return 0.0
    read_bytes = (m * k + k * n) * dtype_bytes(dtype)
    return min(read_bytes, acc.l2_bytes or 0.0)


def _tiled_compute_s(
    acc, m, n, k, dtype, eff: Efficiency, tile: tuple[int, int], aligned: bool = True
) -> float:
    tile_m, tile_n = tile
    n_sms = acc.n_sms or 1
    tiles = math.ceil(m / tile_m) * math.ceil(n / tile_n)
    # split-K, as a continuous share of k: never below one slice of MIN_K_SLICE, never more
    # CTAs than SMs; k_slice then never falls as k grows (a bigger GEMM is never faster)
    split = min(max(k / MIN_K_SLICE, 1.0), n_sms / tiles) if tiles < n_sms else 1.0
    waves = math.ceil(tiles * split / n_sms - 1e-9)
    k_slice = k / split
    per_sm_flops_per_s = acc.peak(dtype) * eff.gemm_fraction(dtype, aligned=aligned) / n_sms
    small = 1.0 + eff.gemm_small_tile_penalty * (tile_m < 128)  # narrower tiles reuse less
    main_loop_s = 2.0 * tile_m * tile_n * k_slice * small / per_sm_flops_per_s
    fixed_s = _tile_fixed_s(acc, tile_m, tile_n, dtype, eff) * small
    if dtype not in SIMT_DTYPES:
        return waves * (main_loop_s + fixed_s)
    # SIMT: the slowest of the FMAs, every tile's operand stream and the pipeline's k-steps;
    # a split-K call's second pass
    stream_s, steps_s = simt_stream_steps_s(acc, dtype, eff, tiles, tile_m, tile_n, k, k_slice,
                                            waves)
    simt_s = max(waves * main_loop_s, stream_s, steps_s) + waves * fixed_s
    if split > 1.0:
        simt_s += eff.simt_split_k_s
    return simt_s


def simt_stream_steps_s(acc, dtype: str, eff: Efficiency, tiles, tile_m: int, tile_n: int, k,
                        k_slice, waves):
    """A SIMT GEMM's two other bounds beside its FMAs: every tile's operand panels streamed at
    ``simt_tile_hbm_fraction`` of HBM, and its pipeline's k-steps (``SIMT_K_STEP`` of k each) at
    ``simt_k_step_s``; scalars here, arrays in ``hwmodels.bulk`` (the same operations)."""
    stream_s = tiles * (tile_m + tile_n) * k * dtype_bytes(dtype) / (
        acc.hbm_bytes_per_s * eff.simt_tile_hbm_fraction)
    return stream_s, waves * k_slice / SIMT_K_STEP * eff.simt_k_step_s


def _tile_fixed_s(acc, tile_m: int, tile_n: int, dtype: str, eff: Efficiency) -> float:
    """Prologue (pipeline fill) and epilogue (writing C) of one tile: memory latency and traffic
    that do not shrink with k, nor change with the speed of the math unit. Counted as
    ``gemm_k_overhead`` k-steps of a 16-bit tensor-core tile whatever the dtype: at its own rate
    an fp32 CUDA-core tile would pay 15x the bf16 time for the same memory work (the H200's fp32
    128^3 takes 8.9 us, against 22 us so priced)."""
    ref = next((d for d in ("bf16", "fp16") if d in acc.peak_flops_per_s), dtype)
    per_sm_flops_per_s = acc.peak(ref) * eff.gemm_fraction(ref) / (acc.n_sms or 1)
    return 2.0 * tile_m * tile_n * eff.gemm_k_overhead / per_sm_flops_per_s


def gemm_flops(m: int, n: int, k: int) -> float:
    return 2.0 * m * n * k
