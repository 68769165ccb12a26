"""NVFP4 weights (W4A4) on Blackwell: bytes, GEMM time, and a one-line error elsewhere."""

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.sim.runtime.serving.on_stack import stack_deployment
from gpuplan.sim.runtime.serving.quantization import quantized_gemm_time, weight_bytes_per_param
from gpuplan.sim.runtime.serving.step_model import StepModel
from gpuplan.workloads.ops import Gemm


def test_an_nvfp4_weight_is_half_a_byte_and_its_scale_share():
    assert weight_bytes_per_param("fp4") == pytest.approx(0.5 + 1 / 16)


def test_a_large_fp4_gemm_computes_at_twice_the_fp8_rate_and_reads_a_quarter_of_bf16():
    acc = get_accelerator("b200")
    eff = efficiency_for("b200")
    big = Gemm(name="down_proj", m=8192, n=8192, k=28672, dtype="bf16")
    fp4, fp8 = (quantized_gemm_time(acc, big, eff, weight_dtype=w) for w in ("fp4", "fp8"))
    assert fp4.compute_s == pytest.approx(fp8.compute_s / 2)
    skinny = Gemm(name="down_proj", m=1, n=8192, k=28672, dtype="bf16")
    m4, m16 = (quantized_gemm_time(acc, skinny, eff, weight_dtype=w).memory_s
               for w in ("fp4", "bf16"))
    assert m4 == pytest.approx(m16 * 0.5625 / 2, rel=0.01)


def test_fp4_decodes_faster_than_fp8_on_b200_and_is_refused_on_hopper():
    fp4, fp8 = (StepModel(stack_deployment("llama3-70b", "b200", "trt-llm", weight_dtype=w,
                                           kv_dtype="fp8")) for w in ("fp4", "fp8"))
    assert fp4.decode_s(8, 8 * 2000) < fp8.decode_s(8, 8 * 2000)
    with pytest.raises(GpuplanError) as err:
        stack_deployment("llama3-70b", "h200", "trt-llm", weight_dtype="fp4")
    assert "h200" in str(err.value) and "Blackwell" in str(err.value)
