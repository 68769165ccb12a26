"""How training stacks launch an MoE block's routed experts: one grouped GEMM per projection
where their framework groups them (megatron-te: NeMo recipes' moe_grouped_gemm; fsdp2:
torchtitan's use_grouped_mm), one GEMM per expert where it loops (deepspeed), ``--expert-gemms``
to say otherwise, and dense models untouched."""

from __future__ import annotations

import dataclasses
import json

import pytest

from gpuplan.cli import main
from gpuplan.errors import GpuplanError
from gpuplan.sim.parallel.kernel_lists import layer_ops
from gpuplan.sim.parallel.shape import Shape, grouped_experts_of, stack_shape_fields
from gpuplan.sim.stacks import get_stack
from gpuplan.sim.stacks.training_defaults import experts_default
from gpuplan.workloads.ops import Gemm
from gpuplan.workloads.presets import get_model

QWEN3_MOE = "tests/data/hf_configs/qwen3-30b-a3b.json"


def _train(capsys, *argv) -> dict:
    assert main(["train", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _launch_share(doc: dict) -> float:
    return sum(c["share"] for c in doc["by_category"] if c["category"] == "launch")


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_frameworks_that_group_experts_list_them_grouped_and_the_loops_do_not(precision):
    for name in ("megatron-te", "fsdp2"):
        assert grouped_experts_of(get_stack(name), precision), name
    for name in ("deepspeed", "composer-fsdp"):
        assert not grouped_experts_of(get_stack(name), precision), name


def test_expert_gemms_on_the_stack_wins_over_its_framework():
    te = get_stack("megatron-te")
    assert not grouped_experts_of(dataclasses.replace(te, expert_gemms="per-expert"), "bf16")
    ds = dataclasses.replace(get_stack("deepspeed"), expert_gemms="grouped")
    assert grouped_experts_of(ds, "bf16")


def test_an_unknown_expert_gemms_is_a_one_line_error_naming_the_field():
    with pytest.raises(GpuplanError, match="expert_gemms='batched' is invalid"):
        dataclasses.replace(get_stack("megatron-te"), expert_gemms="batched")


@pytest.mark.parametrize(("stack", "grouped"), [("megatron-te", True), ("deepspeed", False)])
def test_a_grouped_stack_launches_one_kernel_per_expert_projection(stack, grouped):
    cfg = get_model(QWEN3_MOE)
    shape = Shape(micro_batch=1, seq=4096, ep=8,
                  **stack_shape_fields(get_stack(stack), "bf16", cfg.is_moe))
    fwd, bwd = layer_ops(cfg, shape, 0)
    experts = [op for op in fwd + bwd if isinstance(op, Gemm) and op.name.startswith("expert_")]
    assert len(experts) == 6  # gate_up and down, each with its dgrad and wgrad
    local = cfg.n_experts // 8
    for op in experts:
        if grouped:
            assert op.launches == 1 and 1 < op.count <= local
        else:
            assert op.launches is None and op.count == local


def test_qwen3_moe_on_megatron_te_is_no_longer_mostly_host_issue(capsys):
    args = ("--model", QWEN3_MOE, "--gpu", "h200", "--gpus", "64", "--allow-infeasible")
    grouped = _train(capsys, *args)
    per_expert = _train(capsys, *args, "--expert-gemms", "per-expert")
    # 24,576 kernels per expert GEMM per step left the host behind (70% of the step)
    assert _launch_share(per_expert) > 0.5
    assert _launch_share(grouped) < 0.1
    assert grouped["step_time_s"] < 0.5 * per_expert["step_time_s"]
    gemm = {d["category"]: d["kernels"] for d in grouped["by_category"]}["gemm"]
    gemm_per_expert = {d["category"]: d["kernels"] for d in per_expert["by_category"]}["gemm"]
    assert gemm * 10 < gemm_per_expert
    assert any(d.startswith("--expert-gemms grouped (megatron-te: NeMo recipes'")
               for d in grouped["defaults"])
    assert not any(d.startswith("--expert-gemms") for d in per_expert["defaults"])


def test_a_dense_model_prices_the_same_whatever_the_expert_setting(capsys):
    args = ("--model", "llama3-8b", "--gpu", "h200", "--gpus", "8")
    base = _train(capsys, *args)
    for choice in ("grouped", "per-expert"):
        other = _train(capsys, *args, "--expert-gemms", choice)
        assert other["step_time_s"] == base["step_time_s"]
        assert other["breakdown"] == base["breakdown"]
    assert not any(d.startswith("--expert-gemms") for d in base["defaults"])


def test_search_train_names_the_experts_default_for_an_moe_model(capsys):
    args = ["search", "train", "--model", QWEN3_MOE, "--gpu", "h200", "--gpus", "8",
            "--global-batch", "16", "--json"]
    assert main(args) == 0
    grouped = json.loads(capsys.readouterr().out)
    assert any(d.startswith("--expert-gemms grouped (megatron-te:") for d in grouped["defaults"])
    assert main([*args, "--expert-gemms", "per-expert"]) == 0
    per_expert = json.loads(capsys.readouterr().out)
    assert not any(d.startswith("--expert-gemms") for d in per_expert["defaults"])
    assert per_expert["fastest"]["step_time_s"] > grouped["fastest"]["step_time_s"]


def test_only_stacks_with_a_training_framework_state_an_experts_default():
    assert experts_default(get_stack("deepspeed")).startswith("--expert-gemms per-expert (")
    assert experts_default(get_stack("fsdp2")).startswith("--expert-gemms grouped (fsdp2: ")
    # hf-transformers' experts follow its own choices (fp32 _grouped_mm under autocast)
    assert experts_default(get_stack("hf-transformers")) is None
