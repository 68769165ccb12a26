"""What the hf-transformers stack adds to an MoE block, a prefill record's logits, a wide
head's backward rate and a sliding-window model's mask read."""

import dataclasses

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.attention import kernel_rate
from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.sim.stacks import HostModel, get_stack
from gpuplan.validate.record_prediction import predict_breakdown, record_model
from gpuplan.workloads.feed_forward import moe_block

EFF = efficiency_for("h200")
GLUE = {"expert_masked_fill", "expert_silu", "expert_mul", "expert_weights_mul",
        "expert_combine", "expert_copies"}


def _names(**kw):
    return {op.name for op in moe_block(record_model("mixtral-8x7b"), tokens=512, **kw)}


def test_the_glue_is_transformers_grouped_16_bit_path_only():
    assert _names(dtype="bf16", grouped=True, glue="transformers") >= GLUE
    assert not GLUE & _names(dtype="bf16", grouped=True, glue="none")
    assert not GLUE & _names(dtype="bf16", grouped=False, glue="transformers")
    assert not GLUE & _names(dtype="fp32", grouped=True, glue="transformers")
    assert get_stack("hf-transformers").moe_glue == "transformers"
    assert get_stack("pytorch").moe_glue == "none"


def test_the_glue_slows_an_hf_moe_prefill_but_not_a_dense_one():
    hf = get_stack("hf-transformers")
    bare = dataclasses.replace(hf, moe_glue="none")

    def t(model, stack):
        return predict_breakdown("prefill_step", "h200", {
            "model": model, "layers": 4, "batch": 1, "seq": 4096, "dtype": "bf16",
            "stack": "hf-transformers", "timing": "device"}, stack=stack).total_s
    assert t("mixtral-8x7b", hf) > 1.1 * t("mixtral-8x7b", bare)
    assert t("llama3-8b", hf) == t("llama3-8b", bare)


def test_a_prefill_record_computes_the_last_positions_logits():
    bd = predict_breakdown("prefill_step", "h200", {
        "model": "llama3-8b", "layers": 2, "batch": 2, "seq": 1024, "dtype": "bf16",
        "stack": "hf-transformers", "timing": "device"})
    head = [it for it in bd.items if it.op == "lm_head"]
    assert head and all(it.flops == 2 * 2 * 128256 * 4096 for it in head)


def test_a_wide_head_takes_its_own_backward_rate_where_one_exists():
    assert kernel_rate(EFF, "cudnn", "bwd", 256) == EFF.attn_kernel_rate["cudnn_bwd_d256"]
    assert kernel_rate(EFF, "cudnn", "bwd", 128) == EFF.attn_kernel_rate["cudnn_bwd"]
    assert kernel_rate(EFF, "cudnn", "fwd", 256) == EFF.attn_kernel_rate["cudnn_fwd"]
    assert kernel_rate(EFF, "efficient", "bwd", 256) == EFF.attn_kernel_rate["efficient_bwd"]


def test_a_windowed_model_at_its_window_reads_its_mask_per_query_head():
    def mask_bytes(seq):
        bd = predict_breakdown("prefill_step", "h200", {
            "model": "mistral-7b", "layers": 1, "batch": 1, "seq": seq, "dtype": "bf16",
            "stack": "hf-transformers", "timing": "device"})
        return sum(it.bytes for it in bd.items if it.op == "attention_mask_read")
    assert mask_bytes(2048) == 0  # below the window: is_causal, no mask
    assert mask_bytes(4096) == 32 * 4096 * 4096 * 2


@pytest.mark.parametrize(("field", "value"), [("moe_glue", "vllm"), ("residual_dtype", "fp16")])
def test_an_unknown_stack_choice_is_a_one_line_error_naming_it(field, value):
    with pytest.raises(GpuplanError, match=rf"{field}='{value}' is invalid: choose one of"):
        dataclasses.replace(get_stack("hf-transformers"), **{field: value})


@pytest.mark.parametrize("field", ["moe_block_s", "compiled_call_s"])
def test_a_negative_host_cost_is_a_one_line_error_naming_it(field):
    with pytest.raises(GpuplanError, match=rf"host.{field}=-1e-06 is invalid"):
        HostModel(mode="compiled", **{field: -1e-6})
