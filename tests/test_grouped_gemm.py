"""torch._grouped_mm's price (hwmodels.gemm.grouped_gemm_time) and where it is taken."""

import pytest

from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.hwmodels.gemm import gemm_time, grouped_gemm_time
from gpuplan.hwmodels.price import price
from gpuplan.validate.record_prediction import predict_breakdown
from gpuplan.workloads.ops import Gemm

H200 = get_accelerator("h200")
EFF = efficiency_for("h200")


def test_bf16_is_one_launch_over_the_groups_aggregate_work():
    t = grouped_gemm_time(H200, 8, 1024, 28672, 4096, "bf16", EFF)
    flops = 2 * 8 * 1024 * 28672 * 4096
    assert t.launch_s == EFF.gemm_overhead_s
    assert t.compute_s >= flops / (H200.peak("bf16") * EFF.grouped_gemm_fraction) * 0.99
    # twice the groups of the same shape: twice the work (a longer load settles at a lower
    # clock: hwmodels.power), one launch still
    t2 = grouped_gemm_time(H200, 16, 1024, 28672, 4096, "bf16", EFF)
    assert 2 * t.compute_s <= t2.compute_s <= 2.1 * t.compute_s
    assert t2.launch_s == t.launch_s


def test_a_weight_bound_call_streams_every_groups_weights():
    t = grouped_gemm_time(H200, 64, 4, 2816, 2048, "bf16", EFF)
    weights = 64 * 2816 * 2048 * 2
    assert t.memory_s >= weights / (H200.hbm_bytes_per_s * EFF.grouped_gemm_hbm_fraction)
    assert t.memory_s > t.compute_s


def test_fp32_is_the_fallbacks_gemm_per_group_and_its_copy_of_the_offsets():
    t = grouped_gemm_time(H200, 8, 64, 4096, 14336, "fp32", EFF)
    per_group = gemm_time(H200, 64, 4096, 14336, "fp32", EFF).scaled(8)
    assert (t.compute_s, t.memory_s) == (per_group.compute_s, per_group.memory_s)
    assert t.launch_s == pytest.approx(per_group.launch_s + EFF.grouped_fallback_s)


def test_an_op_with_one_launch_over_its_count_is_priced_grouped_and_a_record_is_the_same():
    op = Gemm(name="expert_gate_up_proj", m=256, n=28672, k=4096, dtype="bf16", count=8,
              launches=1)
    assert price(op, H200, EFF) == grouped_gemm_time(H200, 8, 256, 28672, 4096, "bf16", EFF)
    per_expert = Gemm(name="e", m=256, n=28672, k=4096, dtype="bf16", count=8)
    assert price(per_expert, H200, EFF) == gemm_time(H200, 256, 28672, 4096, "bf16",
                                                     EFF).scaled(8)
    rec = predict_breakdown("grouped_gemm", "h200", {"groups": 8, "m": 256, "n": 28672,
                                                     "k": 4096, "dtype": "bf16",
                                                     "timing": "device"})
    assert rec.total_s == pytest.approx(price(op, H200, EFF).total_s, rel=0.05)
