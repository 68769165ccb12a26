"""fp32 SIMT GEMMs (hwmodels/gemm.py): cuBLAS's GEMV kernel for a few rows, tiles bound by their
FMAs or their operand stream, torch._grouped_mm's fallback, and where fit_stacks fits them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from gpuplan.hwmodels import bulk
from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.hwmodels.efficiency import efficiency_for, queued
from gpuplan.hwmodels.gemm import SIMT_GEMV_MAX_ROWS, _tiled_compute_s, gemm_bytes, gemm_time
from gpuplan.validate.records import parse_record

H200 = get_accelerator("h200")
EFF = efficiency_for("h200")


def test_a_few_rows_run_the_gemv_kernel_at_its_own_share_of_hbm():
    for m in range(1, SIMT_GEMV_MAX_ROWS + 1):
        t = gemm_time(H200, m, 28672, 4096, "fp32", EFF)
        floor = gemm_bytes(m, 28672, 4096, "fp32") / (H200.hbm_bytes_per_s
                                                      * EFF.simt_gemv_hbm_fraction)
        assert t.memory_s == pytest.approx(floor)
        # one row's FMAs are few: the weights' stream bounds it (with the installed shares, 4
        # rows' FMAs at the GEMV's fitted share of the fp32 peak outlast the stream)
        assert t.bound == "memory" or m > 1
    faster = replace(EFF, simt_gemv_hbm_fraction=EFF.simt_gemv_hbm_fraction * 1.5)
    assert gemm_time(H200, 1, 28672, 4096, "fp32", faster).total_s < gemm_time(
        H200, 1, 28672, 4096, "fp32", EFF).total_s
    # the tensor-core dtypes keep their one memory floor
    assert gemm_time(H200, 4, 28672, 4096, "bf16", faster) == gemm_time(
        H200, 4, 28672, 4096, "bf16", EFF)


def test_a_narrow_tile_is_bound_by_its_operand_stream_a_square_by_its_fmas():
    wider = replace(EFF, simt_tile_hbm_fraction=EFF.simt_tile_hbm_fraction * 2)
    narrow = (16, 28672, 4096)
    assert gemm_time(H200, *narrow, "fp32", wider).compute_s < gemm_time(
        H200, *narrow, "fp32", EFF).compute_s
    square = (8192, 8192, 8192, "fp32")
    for tile, moves in (((128, 128), False), ((32, 128), True)):
        before = _tiled_compute_s(H200, *square, EFF, tile)
        assert (_tiled_compute_s(H200, *square, wider, tile) < before) == moves, tile


def test_more_rows_are_never_faster_along_the_simt_paths():
    times = [gemm_time(H200, m, 4096, 7168, "fp32", EFF).total_s
             for m in (1, 2, 4, 8, 16, 64, 256, 1024, 4096)]
    assert times == sorted(times)


@pytest.mark.parametrize("eff", [EFF, queued(EFF), replace(EFF, l2_flushed=True)])
def test_the_bulk_model_gives_the_scalar_doubles_across_the_gemv_edge(eff):
    m = [1, 3, 4, 5, 8, 16, 33, 4096, 1, 4]
    n = [4096, 28672, 1000, 7168, 2048, 2816, 1408, 4096, 4095, 11]
    k = [7168, 4096, 999, 2048, 1408, 2048, 2048, 4096, 4097, 3]
    got = bulk.gemm_times(H200, m, n, k, "fp32", eff, 3)
    want = [gemm_time(H200, *s, "fp32", eff).scaled(3) for s in zip(m, n, k, strict=True)]
    for field in ("compute_s", "memory_s", "launch_s"):
        np.testing.assert_array_equal(getattr(got, field),
                                      [getattr(w, field) for w in want], err_msg=field)


def _rec(kind, **params):
    return parse_record({"kind": kind, "device": "h200", "params": params,
                         "measured": {"time_s": 1e-3}})


def test_fit_stacks_fits_each_simt_share_on_its_own_device_timed_fp32_records():
    from gpuplan.validate.fit_stacks import kernels as fit_stacks

    model = fit_stacks.Model.__new__(fit_stacks.Model)
    gemv = _rec("gemm", m=4, n=64, k=64, dtype="fp32", stack="pytorch", timing="device")
    tile = _rec("grouped_gemm", groups=8, m=16, n=64, k=64, dtype="fp32", stack="pytorch",
                timing="device")
    isolated = _rec("gemm", m=16, n=64, k=64, dtype="fp32", stack="pytorch", timing="isolated")
    bf16 = _rec("grouped_gemm", groups=8, m=16, n=64, k=64, dtype="bf16", stack="pytorch",
                timing="device")
    assert model.touches(gemv, "simt_gemv_hbm_fraction")
    assert not model.touches(gemv, "simt_tile_hbm_fraction")
    assert model.touches(tile, "simt_tile_hbm_fraction")
    assert model.touches(tile, "grouped_fallback_s")
    assert not model.touches(gemv, "grouped_fallback_s")  # a plain mm copies nothing
    assert not any(model.touches(isolated, k) for k in fit_stacks.SIMT_KEYS)
    assert not any(model.touches(bf16, k) for k in fit_stacks.SIMT_KEYS)
    assert model.touches(bf16, "grouped_gemm_fraction")
    iso_grouped = _rec("grouped_gemm", groups=8, m=16, n=64, k=64, dtype="fp32",
                       stack="pytorch", timing="isolated")
    assert model.touches(iso_grouped, "isolated_grouped_fallback")
    assert model.touches(iso_grouped, "isolated_fallback_group")
    assert not model.touches(iso_grouped, "isolated_grouped_gemm")
    assert model.touches(isolated, "isolated_simt_gemm")
    assert not model.touches(isolated, "isolated_gemm")  # the 16-bit and fp8 calls' own


def test_an_isolated_fp32_call_pays_its_own_fixed_cost_the_fallback_one_per_group():
    from gpuplan.sim.stacks import get_stack
    from gpuplan.sim.stacks.kernels import ISOLATED_CALL_S, isolated_call_s

    stack = get_stack("pytorch")
    params = {"groups": 8, "m": 16, "n": 64, "k": 64}
    fp32 = isolated_call_s(stack, "grouped_gemm", params | {"dtype": "fp32"})
    assert fp32 == pytest.approx(ISOLATED_CALL_S["grouped_fallback"]
                                 + 8 * ISOLATED_CALL_S["fallback_group"])
    more = isolated_call_s(stack, "grouped_gemm", params | {"groups": 64, "dtype": "fp32"})
    assert more - fp32 == pytest.approx(56 * ISOLATED_CALL_S["fallback_group"])
    mm = {"m": 16, "n": 64, "k": 64}
    assert isolated_call_s(stack, "gemm", mm | {"dtype": "fp32"}) == pytest.approx(
        ISOLATED_CALL_S["simt_gemm"])
    assert isolated_call_s(stack, "gemm", mm | {"dtype": "bf16"}) == pytest.approx(
        ISOLATED_CALL_S["gemm"])
    assert isolated_call_s(stack, "grouped_gemm", params | {"dtype": "bf16"}) == pytest.approx(
        ISOLATED_CALL_S["grouped_gemm"])
