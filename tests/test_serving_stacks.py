"""Serving stacks (vllm, sglang, trt-llm, eager-2023, gpuplan-server): their kernels per device,
CUDA-graph buckets, scheduler defaults, fitted parameters, and --stack on serve, plan and edge."""

import json

import pytest

from gpuplan.cli import main
from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.sim.runtime.serving.on_stack import kv_memory_share, stack_deployment, stack_scheduler
from gpuplan.sim.runtime.serving.step_model import StepModel
from gpuplan.sim.stacks import get_stack, resolved_attention
from gpuplan.sim.stacks.serving import FIT_PATH, SGLANG_BUCKETS, ServingRuntime, vllm_buckets
from gpuplan.validate.published import serving as published

SERVING = ("vllm", "sglang", "trt-llm", "eager-2023", "gpuplan-server")


@pytest.mark.parametrize("name", SERVING)
def test_every_serving_stack_is_registered_with_its_sources_and_a_runtime(name):
    stack = get_stack(name)
    assert stack.sources and stack.serving is not None and stack.kv_cache == "paged"


@pytest.mark.parametrize(("gpu", "kernel"), [("h200", "flash3"), ("h100-sxm", "flash3"),
                                             ("a100-sxm-80gb", "flash2"), ("b200", "cudnn")])
def test_vllm_runs_fa3_on_hopper_fa2_on_ampere_and_a_priced_kernel_on_blackwell(gpu, kernel):
    got = resolved_attention(get_stack("vllm"), get_accelerator(gpu))
    assert (got.prefill, got.decode) == (kernel, kernel)


def test_vllm_buckets_follow_its_capture_rule():
    b = vllm_buckets(256)
    assert b[:5] == (1, 2, 4, 8, 16) and b[-1] == 512
    assert all(y - x == 8 for x, y in zip(b[3:], b[4:], strict=False) if y < 256)
    assert all(y - x == 16 for x, y in zip(b, b[1:], strict=False) if x >= 256)
    assert vllm_buckets(64)[-1] == 128  # min(2 x max_num_seqs, 512)
    assert SGLANG_BUCKETS[:4] == (1, 2, 4, 8) and SGLANG_BUCKETS[-1] == 160


def test_a_vllm_decode_of_3_sequences_costs_the_padded_batch_of_4():
    step = StepModel(stack_deployment("llama3-8b", "h200", "vllm"))
    assert step.decode_s(3, 3 * 1000) == pytest.approx(step.decode_s(4, 3 * 1000 + 1))
    assert step.decode_s(3, 3000) > StepModel(
        stack_deployment("llama3-8b", "h200", "gpuplan-server")).decode_s(3, 3000) * 0.5


def test_trt_llm_issues_kernels_cheaper_than_eager_pytorch_by_its_fitted_factor():
    trt, eager = (stack_deployment("llama3-8b", "h200", s) for s in ("trt-llm", "gpuplan-server"))
    factor = get_stack("trt-llm").host.call_factor
    assert trt.eff.host_launch_s == pytest.approx(factor * eager.eff.host_launch_s)
    # decode replays CUDA graphs (the PyTorch backend's default), unpadded (enable_padding=False)
    assert trt.cuda_graph and trt.decode_buckets == ()


def test_the_free_memory_share_of_trt_llm_is_more_of_the_device_than_the_share_itself():
    dep = stack_deployment("llama3-8b", "h200", "trt-llm")
    sched = stack_scheduler("trt-llm")
    assert sched.max_seqs == 2048 and sched.max_batched_tokens == 8192
    assert kv_memory_share("trt-llm", dep, sched).memory_utilization > 0.9
    vllm = stack_scheduler("vllm")
    assert kv_memory_share("vllm", dep, vllm) == vllm


def test_the_eager_engine_pays_its_cpu_time_per_iteration_and_per_rank():
    run = get_stack("eager-2023").serving
    dep = stack_deployment("llama2-70b", "h100-sxm", "eager-2023", tp=4)
    assert dep.iteration_overhead_s == pytest.approx(run.iteration_overhead_s
                                                     + 3 * run.overhead_per_rank_s)


def test_presets_carry_the_committed_fit():
    fit = json.loads(FIT_PATH.read_text())
    assert fit["seed"] == 0
    for name, values in fit["stacks"].items():
        stack = get_stack(name)
        for key, value in values.items():
            got = stack.host.call_factor if key == "call_factor" else getattr(stack.serving, key)
            if key == "host_factors":  # JSON keeps the pairs as lists
                value = tuple(tuple(pair) for pair in value)
            assert got == value


def test_every_engine_of_the_published_rows_has_a_stack():
    rows = published.load_rows()
    assert set(rows["engine"]) <= set(published.ENGINE_STACK)
    for stack in set(published.ENGINE_STACK.values()):
        get_stack(stack)


def test_the_eager_engine_pays_cpu_time_per_running_sequence_on_every_cost_path():
    from gpuplan.sim.runtime.serving.iteration import Batch, iteration_breakdown

    run = get_stack("eager-2023").serving
    assert run.seq_overhead_s > 0  # the committed fit
    dep = stack_deployment("llama2-70b", "h100-sxm", "eager-2023", tp=4)
    step = StepModel(dep)
    one, many = step.decode_s(1, 600), step.decode_s(33, 33 * 600)
    bare = StepModel(stack_deployment("llama2-70b", "h100-sxm", "eager-2023", tp=4,
                                      seq_overhead_s=0.0))  # fmt: skip
    assert (many - one) - (bare.decode_s(33, 33 * 600) - bare.decode_s(1, 600)) == pytest.approx(
        32 * run.seq_overhead_s)
    for batch in (Batch(decode_seqs=33, decode_kv_tokens=33 * 600),
                  Batch(prefill=((512, 0, 4),), decode_seqs=3, decode_kv_tokens=1800)):
        assert step.iteration_s(batch) == pytest.approx(iteration_breakdown(dep, batch).total_s,
                                                        rel=1e-9)  # fmt: skip
    run_s = step.decode_run_s(33, 33 * 600, 40)
    assert run_s == pytest.approx(sum(step.decode_s(33, 33 * (600 + j)) for j in range(40)),
                                  rel=1e-9)  # fmt: skip
    assert step.decode_iterations_until(33, 33 * 600, run_s) == 40


def test_a_host_factor_scales_every_cpu_cost_of_that_machine_only():
    import dataclasses

    from gpuplan.sim.runtime.serving.on_stack import deployment_fields
    from gpuplan.sim.stacks import register

    original = get_stack("eager-2023")
    run = dataclasses.replace(original.serving, host_factors=(("a100-sxm-80gb", 2.0),))
    try:
        register(dataclasses.replace(original, serving=run))
        slow = deployment_fields("eager-2023", tp=4, gpu="a100-sxm-80gb")
        same = deployment_fields("eager-2023", tp=4, gpu="h100-sxm")
        a100 = stack_deployment("llama2-70b", "a100-sxm-80gb", "eager-2023", tp=4)
        base = stack_deployment("llama2-70b", "a100-sxm-80gb", "vllm", tp=4)
    finally:
        register(original)
    assert slow["iteration_overhead_s"] == pytest.approx(2 * run.overhead_s(4))
    assert slow["seq_overhead_s"] == pytest.approx(2 * run.seq_overhead_s)
    assert same["iteration_overhead_s"] == pytest.approx(run.overhead_s(4))
    ref = stack_deployment("llama2-70b", "a100-sxm-80gb", "eager-2023", tp=4)
    assert a100.eff.host_launch_s == pytest.approx(2 * ref.eff.host_launch_s * ref_factor(ref))
    assert base.eff.host_launch_s > 0
    with pytest.raises(GpuplanError, match="host_factors"):
        ServingRuntime(cuda_graph=False, host_factors=(("a100-sxm-80gb", 0.0),))


def ref_factor(dep):
    """1 over the committed host factor of ``dep``'s GPU for eager-2023 (the reference above
    already carries it)."""
    return 1.0 / get_stack("eager-2023").serving.host_factor(dep.acc.key)


@pytest.mark.parametrize("bad", [{"policy": "static"}, {"memory_fraction": 0.0},
                                 {"iteration_overhead_s": -1e-3}, {"kv_memory": "half"},
                                 {"seq_overhead_s": -1e-4}])
def test_a_runtime_with_a_bad_field_is_a_one_line_error(bad):
    with pytest.raises(GpuplanError) as err:
        ServingRuntime(cuda_graph=True, **bad)
    assert "\n" not in str(err.value) and next(iter(bad)) in str(err.value)


def _serve(*extra):
    return main(["serve", "--model", "llama3-8b", "--gpu", "h200", "--rate", "2",
                 "--prompt-tokens", "256", "--output-tokens", "16", "--requests", "20", *extra])


def test_serve_prints_and_records_the_stack_it_priced(capsys):
    assert _serve("--stack", "vllm") == 0
    assert "stack vllm (attention prefill flash3" in capsys.readouterr().out
    assert _serve("--stack", "sglang", "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["config"]["stack"]["name"] == "sglang"
    assert doc["config"]["stack"]["attention"]["decode"] == "flashinfer"
    assert doc["config"]["max_seqs"] == 4096 and doc["config"]["policy"] == "chunked"


def test_serve_flags_override_the_stack_and_bad_ones_are_one_line(capsys):
    assert _serve("--stack", "vllm", "--max-seqs", "32", "--policy", "continuous", "--json") == 0
    c = json.loads(capsys.readouterr().out)["config"]
    assert (c["max_seqs"], c["policy"]) == (32, "continuous")
    assert _serve("--stack", "no-such") == 2
    assert "stack" in capsys.readouterr().err
    assert main(["serve", "--model", "llama3-8b", "--gpu", "a100-sxm-80gb", "--rate", "1",
                 "--prompt-tokens", "8", "--output-tokens", "2", "--attention-kernel",
                 "flash3"]) == 2
    err = capsys.readouterr().err
    assert "flash3" in err and "a100-sxm-80gb" in err and len(err.strip().splitlines()) == 1


def test_serve_edge_takes_the_stack(capsys):
    assert main(["serve", "edge", "--model", "llama3-8b", "--gpu", "h200", "--batch", "1",
                 "--weight-dtype", "fp8", "--stack", "trt-llm", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["stack"]["name"] == "trt-llm"


def test_edge_prices_jetson_orin_on_its_tensor_cores_not_fp32():
    acc = get_accelerator("jetson-agx-orin-64gb")
    assert acc.peak("bf16") == pytest.approx(acc.peak("int8") / 2)  # A100's Tensor Core ratio
    assert acc.peak("bf16") > 8 * acc.peak("fp32")
