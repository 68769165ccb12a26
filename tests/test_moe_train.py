"""MoE training under autocast over fp32 weights: the experts' ``torch._grouped_mm`` calls run in
fp32 on the stacks that say so (``Stack.moe_autocast_dtype``), in the one-GPU training path, the
whole-model records and the search's bulk pricing alike."""

from __future__ import annotations

import dataclasses

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.hwmodels.efficiency import efficiency_for, queued
from gpuplan.sim.parallel.compute import micro_batch_costs
from gpuplan.sim.parallel.kernel_lists import layer_ops
from gpuplan.sim.parallel.op_memo import KernelTable, ShapeKernels, shape_time_table
from gpuplan.sim.parallel.shape import Shape, expert_dtype_of, grouped_experts_of
from gpuplan.sim.parallel.stage import TIME_FIELDS, shape_times
from gpuplan.sim.stacks import get_stack
from gpuplan.validate.record_prediction import predict_breakdown
from gpuplan.workloads.ops import Gemm
from gpuplan.workloads.presets import get_model

# one record of the H200 stack campaign (data/h200_stacks/run3/models.jsonl): Mixtral cut to
# 2 layers, 2 x 4096 tokens, AdamW under bf16 autocast over fp32 weights, measured 0.8378 s
MIXTRAL_STEP = {"model": "mixtral-8x7b", "layers": 2, "micro_batch": 2, "seq": 4096,
                "optimizer": "adamw", "precision": "bf16-mixed", "stack": "hf-transformers"}
MIXTRAL_MEASURED_S = 0.8378


def test_an_unknown_expert_dtype_is_a_one_line_error_naming_the_field():
    with pytest.raises(GpuplanError, match="moe_autocast_dtype='fp16' is invalid"):
        dataclasses.replace(get_stack("hf-transformers"), moe_autocast_dtype="fp16")


def test_only_autocast_stacks_that_say_so_run_their_experts_in_fp32():
    assert expert_dtype_of(get_stack("hf-transformers"), "bf16") == "fp32"
    assert expert_dtype_of(get_stack("pytorch"), "bf16") == "fp32"
    # compiled: transformers' grouped_mm fallback casts to the fp32 weights' dtype, eagerly
    assert expert_dtype_of(get_stack("torch-compile"), "bf16") == "fp32"
    for name in ("megatron-te", "harness", "deepspeed", "fsdp2"):
        assert expert_dtype_of(get_stack(name), "bf16") == "bf16", name
    assert expert_dtype_of(get_stack("hf-transformers"), "fp8") == "bf16"
    assert grouped_experts_of(get_stack("hf-transformers"), "bf16")
    assert grouped_experts_of(get_stack("megatron-te"), "bf16")  # NeMo recipes group them
    assert not grouped_experts_of(get_stack("deepspeed"), "bf16")  # DeepSpeed-MoE loops


def test_fp32_experts_are_grouped_fp32_gemms_launched_once_per_expert():
    cfg = get_model("mixtral-8x7b")
    shape = Shape(micro_batch=1, seq=2048, expert_dtype="fp32", grouped_experts=True)
    fwd, bwd = layer_ops(cfg, shape, 0)
    experts = [op for op in fwd + bwd if isinstance(op, Gemm) and op.name.startswith("expert_")]
    assert len(experts) == 6  # gate_up and down, each with its dgrad and wgrad
    assert all(op.dtype == "fp32" and op.launches == op.count == cfg.n_experts for op in experts)
    router = next(op for op in fwd if op.name == "router")
    assert router.dtype == "bf16"  # an nn.Linear: autocast casts it


def test_the_mixtral_step_prices_its_fp32_experts_within_5_percent():
    got = predict_breakdown("model_train_step", "h200", MIXTRAL_STEP).total_s
    assert abs(got - MIXTRAL_MEASURED_S) / MIXTRAL_MEASURED_S < 0.05
    # the same step with bf16 experts (the bf16 grouped GEMM) is far too fast
    bf16 = dataclasses.replace(get_stack("hf-transformers"), moe_autocast_dtype="bf16")
    fast = predict_breakdown("model_train_step", "h200", MIXTRAL_STEP, stack=bf16).total_s
    assert fast < 0.5 * MIXTRAL_MEASURED_S


@pytest.mark.parametrize("impl", ["eager", "fused", "compiled"])
def test_bulk_pricing_equals_the_one_shape_path_with_fp32_grouped_experts(impl):
    cfg = get_model("mixtral-8x7b")
    acc = get_accelerator("h200")
    eff = queued(efficiency_for(acc.key))
    base = Shape(micro_batch=2, seq=2048, expert_dtype="fp32", grouped_experts=True,
                 residual_dtype="fp32")
    shapes = [base, dataclasses.replace(base, ep=4, load=1.3), dataclasses.replace(base, tp=2),
              dataclasses.replace(base, expert_dtype="bf16", grouped_experts=False,
                                  residual_dtype="bf16"),
              dataclasses.replace(base, ep=8)]
    kernels = ShapeKernels(cfg, impl, KernelTable(acc, eff))
    got = shape_time_table([kernels.parts(s) for s in shapes], kernels.table, eff)
    for i, shape in enumerate(shapes):
        want = shape_times(micro_batch_costs(cfg, shape, acc, eff, impl))
        assert {f: float(got[f][i]) for f in TIME_FIELDS} == want, (shape, impl)
    # and the fp32 experts' block is several times the bf16 one's at the same shape
    assert float(got["moe_fwd"][0]) > 4 * float(got["moe_fwd"][3])
    assert float(got["moe_bwd"][0]) > 4 * float(got["moe_bwd"][3])


def test_grouped_activation_keeps_its_rows_under_expert_parallelism():
    cfg = get_model("mixtral-8x7b")
    shape = Shape(micro_batch=1, seq=4096, expert_dtype="fp32", grouped_experts=True)
    one, _ = layer_ops(cfg, shape, 0)
    four, _ = layer_ops(cfg, dataclasses.replace(shape, ep=4), 0)
    act = [op for op in one if op.name == "expert_silu_mul"][0]
    act4 = [op for op in four if op.name == "expert_silu_mul"][0]
    assert act4.count == act.count == 1 and act4.tokens == act.tokens  # n/ep experts x ep rows
    g4 = [op for op in four if op.name == "expert_gate_up_proj"][0]
    assert g4.count == g4.launches == cfg.n_experts // 4


def test_the_fp32_residual_stream_runs_norms_adds_and_rope_in_fp32_and_casts_each_linear_input():
    cfg = get_model("llama3-8b")
    shape = Shape(micro_batch=1, seq=1024, residual_dtype="fp32")
    fwd, bwd = layer_ops(cfg, shape, 0)
    by_name = {op.name: op for op in fwd}
    for name in ("attn_norm", "mlp_norm", "attn_residual", "mlp_residual", "rope_q", "rope_k"):
        assert by_name[name].dtype == "fp32", name
    casts = by_name["autocast_input_casts"]
    assert casts.count == 5  # q, k, v, gate, up: not o_proj, whose input is the attention's
    assert casts.bytes == 5 * 1024 * cfg.d_model * (4 + 2)
    assert any(op.name == "autocast_input_casts.bwd" for op in bwd)
    plain, _ = layer_ops(cfg, Shape(micro_batch=1, seq=1024), 0)
    assert not any(op.name.startswith("autocast_input_casts") for op in plain)
    from gpuplan.sim.parallel.shape import residual_dtype_of
    assert residual_dtype_of(get_stack("hf-transformers"), "bf16") == "fp32"
    for name in ("pytorch", "torch-compile", "harness", "megatron-te", "fsdp2"):
        assert residual_dtype_of(get_stack(name), "bf16") == "bf16", name
