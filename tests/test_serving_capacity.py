"""Paged KV cache capacity: what one GPU holds after weights and workspace, and the errors of a
model that does not fit."""

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.sim.runtime.serving.deployment import SchedulerConfig, deployment
from gpuplan.sim.runtime.serving.kv_cache import (
    blocks_for,
    fitting_tp,
    kv_bytes_per_token,
    kv_capacity,
    weights_bytes_per_gpu,
)
from gpuplan.workloads.params import count_params
from gpuplan.workloads.presets import get_model


def test_a_llama3_8b_token_takes_128_kib_of_cache_and_half_under_tp8_or_fp8():
    cfg = get_model("llama3-8b")
    # 32 layers x 8 KV heads x 128 dims x (K + V) x 2 bytes
    assert kv_bytes_per_token(cfg, tp=1, kv_dtype="bf16") == 32 * 8 * 128 * 2 * 2
    assert kv_bytes_per_token(cfg, tp=1, kv_dtype="fp8") == 32 * 8 * 128 * 2
    assert kv_bytes_per_token(cfg, tp=8, kv_dtype="bf16") == 32 * 128 * 2 * 2
    # more ranks than KV heads replicate them: still one head per rank
    assert kv_bytes_per_token(get_model("llama3-70b"), tp=16, kv_dtype="bf16") == 80 * 128 * 4


def test_bf16_weights_are_two_bytes_per_parameter_split_over_tp():
    cfg = get_model("llama2-7b")
    total = count_params(cfg).total
    assert weights_bytes_per_gpu(cfg, tp=1, weight_dtype="bf16") == pytest.approx(2 * total)
    assert weights_bytes_per_gpu(cfg, tp=2, weight_dtype="bf16") == pytest.approx(total, rel=1e-4)


def test_quantized_weights_and_an_fp8_cache_leave_more_tokens():
    sched = SchedulerConfig()
    tokens = {
        (w, kv): kv_capacity(
            deployment("llama3-8b", "h100-sxm", weight_dtype=w, kv_dtype=kv), sched
        ).tokens  # fmt: skip
        for w, kv in (("bf16", "bf16"), ("int4", "bf16"), ("bf16", "fp8"))
    }
    assert tokens[("int4", "bf16")] > tokens[("bf16", "bf16")]
    assert tokens[("bf16", "fp8")] == pytest.approx(2 * tokens[("bf16", "bf16")], rel=0.01)


def test_capacity_terms_add_up_to_the_usable_memory():
    cap = kv_capacity(deployment("llama2-7b", "a100-sxm-80gb"), SchedulerConfig())
    used = cap.weights_bytes + cap.workspace_bytes + cap.kv_bytes
    assert used <= cap.usable_bytes < used + cap.block_bytes
    assert cap.usable_bytes == pytest.approx(0.9 * 80e9)


def test_a_model_that_does_not_fit_names_the_tp_it_needs():
    dep = deployment("llama2-70b", "a100-sxm-80gb")
    with pytest.raises(GpuplanError, match=r"does not fit .* it needs tp=2 \(2 GPUs"):
        kv_capacity(dep, SchedulerConfig())
    assert fitting_tp(dep, SchedulerConfig()) == 2


def test_a_model_too_big_for_a_node_says_which_pipeline_would_hold_it():
    dep = deployment("llama3.1-405b", "h100-sxm", tp=8)
    with pytest.raises(GpuplanError, match=r"it needs tp=8 x pp=2 \(16 GPUs per replica: --tp 8 "):
        kv_capacity(dep, SchedulerConfig(max_model_len=8192))


def test_a_model_too_big_for_any_pipeline_says_how_many_gpus_it_would_need(monkeypatch):
    from gpuplan.sim.runtime.serving import pipeline

    monkeypatch.setattr(pipeline, "MAX_PP_ADVICE", 2)  # 810 GB of bf16 weights over 16 L4s
    dep = deployment("llama3.1-405b", "l4", tp=8)
    with pytest.raises(GpuplanError, match=r"even tp=8 is not enough: it needs about \d+ GPUs"):
        kv_capacity(dep, SchedulerConfig(max_model_len=8192))


def test_blocks_round_up():
    assert [blocks_for(t, 16) for t in (1, 16, 17, 32, 33)] == [1, 1, 2, 2, 3]


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"policy": "fifo"}, "policy"),
        ({"max_seqs": 0}, "max_seqs"),
        ({"memory_utilization": 1.5}, "memory_utilization"),
        ({"preemption": "drop"}, "preemption"),
        ({"max_batched_tokens": -4}, "max_batched_tokens"),
    ],
)
def test_a_bad_scheduler_setting_is_an_error_naming_it(kw, field):
    with pytest.raises(GpuplanError, match=field):
        SchedulerConfig(**kw)


def test_policies_default_their_token_budget_as_vllm_does():
    cfg = get_model("llama2-7b")  # max_seq_len 4096
    assert SchedulerConfig(policy="continuous").batched_tokens(cfg) == 4096
    assert SchedulerConfig(policy="continuous", max_model_len=1024).batched_tokens(cfg) == 2048
    assert SchedulerConfig(policy="chunked").batched_tokens(cfg) == 2048
    assert SchedulerConfig(policy="static").batched_tokens(cfg) is None
