"""The serving iteration model: the fast memoized model equals the operator-by-operator
reference, and decode runs have an exact closed form."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.errors import GpuplanError
from gpuplan.sim.runtime.serving.deployment import deployment
from gpuplan.sim.runtime.serving.quantization import quantized_gemm_time, weight_bytes_per_param
from gpuplan.sim.runtime.serving.step_model import Batch, StepModel, iteration_breakdown
from gpuplan.workloads.ops import Gemm

DEPLOYMENTS = {
    "dense": ("llama2-7b", "a100-sxm-80gb", {}),
    "gqa-tp2-fp8": ("llama3-8b", "h200", {"tp": 2, "weight_dtype": "fp8", "kv_dtype": "fp8"}),
    "moe-int4-eager": (
        "mixtral-8x7b",
        "h200",
        {"tp": 4, "weight_dtype": "int4", "impl": "eager", "cuda_graph": False},
    ),
    "compiled-tp8": ("llama3-70b", "h100-sxm", {"tp": 8, "impl": "compiled"}),
    "edge-fp32-math": ("llama2-7b", "jetson-agx-orin-64gb", {"weight_dtype": "int4"}),
    "overhead": ("llama3-8b", "h100-sxm", {"iteration_overhead_s": 2e-3}),
}
_STEPS: dict[str, tuple] = {}


def step_of(name):
    if name not in _STEPS:
        model, gpu, kw = DEPLOYMENTS[name]
        dep = deployment(model, gpu, **kw)
        _STEPS[name] = (dep, StepModel(dep))
    return _STEPS[name]


batches = st.builds(
    lambda pieces, decode, per_seq, all_sample: Batch(
        prefill=tuple(pieces),
        decode_seqs=decode,
        decode_kv_tokens=decode * per_seq,
        sampled=None if all_sample else decode,  # chunks that do not end emit nothing
    ),
    st.lists(
        st.tuples(st.integers(1, 2500), st.integers(0, 3000), st.sampled_from([1, 1, 2])),
        max_size=2,
    ),
    st.integers(0, 160),
    st.integers(1, 3000),
    st.booleans(),
).filter(lambda b: b.tokens > 0)


@pytest.mark.parametrize("name", sorted(DEPLOYMENTS))
@settings(max_examples=12, deadline=None)
@given(batch=batches)
def test_the_fast_model_equals_the_operator_by_operator_reference(name, batch):
    dep, step = step_of(name)
    reference = iteration_breakdown(dep, batch).total_s
    assert step.iteration_s(batch) == pytest.approx(reference, rel=1e-9)


@pytest.mark.parametrize("name", ["dense", "gqa-tp2-fp8", "overhead"])
def test_a_decode_run_costs_the_sum_of_its_iterations(name):
    _, step = step_of(name)
    for seqs, kv, k in ((1, 501, 300), (40, 40 * 900, 57), (128, 128 * 50, 1000)):
        each = sum(step.decode_s(seqs, kv + seqs * j) for j in range(k))
        assert step.decode_run_s(seqs, kv, k) == pytest.approx(each, rel=1e-9)


@pytest.mark.parametrize("name", ["dense", "overhead"])
def test_iterations_until_is_the_first_iteration_boundary_at_or_after_the_time(name):
    _, step = step_of(name)
    seqs, kv = 16, 16 * 700
    for elapsed in (1e-9, 0.0101, 0.37, 2.5, 11.0):
        n = step.decode_iterations_until(seqs, kv, elapsed)
        assert n >= 1
        assert step.decode_run_s(seqs, kv, n) >= elapsed
        assert n == 1 or step.decode_run_s(seqs, kv, n - 1) < elapsed


def test_decode_time_never_falls_as_the_context_grows():
    _, step = step_of("dense")
    times = [step.decode_s(8, 8 * c) for c in (1, 10, 100, 1000, 4000)]
    assert times == sorted(times)


def test_a_decode_iteration_is_dominated_by_reading_the_weights_at_batch_one():
    dep, _ = step_of("dense")
    bd = iteration_breakdown(dep, Batch(decode_seqs=1, decode_kv_tokens=101))
    by = bd.by("category").set_index("category")["time_s"]
    assert by["gemm"] / bd.total_s > 0.6


def test_int4_weights_make_a_memory_bound_decode_faster_and_fp8_a_prefill_faster():
    base = StepModel(deployment("llama3-8b", "h100-sxm"))
    int4 = StepModel(deployment("llama3-8b", "h100-sxm", weight_dtype="int4"))
    fp8 = StepModel(deployment("llama3-8b", "h100-sxm", weight_dtype="fp8"))
    assert int4.decode_s(1, 1000) < 0.6 * base.decode_s(1, 1000)
    prefill = Batch(prefill=((4096, 0, 1),))
    assert fp8.iteration_s(prefill) < 0.8 * base.iteration_s(prefill)


def test_fp8_weights_on_a_gpu_without_fp8_run_weight_only():
    dep = deployment("llama2-7b", "a100-sxm-80gb", weight_dtype="fp8")
    gemm = Gemm(name="qkv_proj", m=1, n=12288, k=4096, dtype="bf16")
    kt = quantized_gemm_time(dep.acc, gemm, dep.eff, weight_dtype="fp8")
    bf16 = quantized_gemm_time(dep.acc, gemm, dep.eff, weight_dtype="bf16")
    assert kt.memory_s == pytest.approx(bf16.memory_s / 2, rel=0.01)


def test_quantized_weights_carry_their_group_scales():
    assert weight_bytes_per_param("int4") == pytest.approx(0.5 + 2 / 128)
    assert weight_bytes_per_param("bf16") == 2
    with pytest.raises(GpuplanError, match="weight_dtype"):
        weight_bytes_per_param("int3")


def test_cuda_graphs_only_speed_up_decode_only_iterations():
    eager = StepModel(deployment("llama3-8b", "h100-sxm", cuda_graph=False))
    graph = StepModel(deployment("llama3-8b", "h100-sxm", cuda_graph=True))
    assert graph.decode_s(1, 100) < eager.decode_s(1, 100)
    mixed = Batch(prefill=((100, 0, 1),), decode_seqs=1, decode_kv_tokens=100)
    assert graph.iteration_s(mixed) == pytest.approx(eager.iteration_s(mixed))


def test_a_bad_deployment_is_an_error_naming_the_field():
    with pytest.raises(GpuplanError, match="tp=3 does not divide"):
        deployment("llama3-8b", "h100-sxm", tp=3)
    with pytest.raises(GpuplanError, match="one node"):
        deployment("llama3-8b", "h100-sxm", tp=16)
    with pytest.raises(GpuplanError, match="kv_dtype"):
        deployment("llama3-8b", "h100-sxm", kv_dtype="int8")
    with pytest.raises(GpuplanError, match="vision"):
        deployment("vit-l-14", "h100-sxm")


def test_a_prefill_piece_of_many_sequences_is_one_kernel():
    dep, step = step_of("dense")
    batched = step.iteration_s(Batch(prefill=((512, 0, 4),)))
    assert math.isfinite(batched)
    assert batched == pytest.approx(iteration_breakdown(dep, Batch(prefill=((512, 0, 4),))).total_s)
