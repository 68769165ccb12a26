"""The Hugging Face decode model: grouped experts, repeat_kv under a mask, device overlap."""


import dataclasses

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.hwmodels.launch import launch_cost
from gpuplan.sim.estimate.inference import decode_breakdown
from gpuplan.sim.stacks import HostModel, get_stack
from gpuplan.workloads.feed_forward import experts_hit, moe_block
from gpuplan.workloads.presets import get_model

H200 = get_accelerator("h200")
EFF = efficiency_for("h200")


def _kernels(bd, op):
    return sum(i.kernels for i in bd.items if i.op == op)


def test_grouped_experts_launch_one_kernel_per_projection_and_read_only_the_hit_experts():
    cfg = get_model("deepseek-v3")
    assert experts_hit(cfg, 1) == cfg.top_k and experts_hit(cfg, 4096) == cfg.n_experts
    loop = moe_block(cfg, tokens=1, dtype="bf16")
    grouped = moe_block(cfg, tokens=1, dtype="bf16", grouped=True)
    gate = {op.name: op for op in grouped}["expert_gate_up_proj"]
    assert gate.launches == 1 and gate.count == cfg.top_k
    loop_bytes = {op.name: op for op in loop}["expert_gate_up_proj"].bytes
    assert gate.bytes < loop_bytes * cfg.top_k / cfg.n_experts * 1.01
    hf = decode_breakdown(H200, EFF, cfg, get_stack("hf-transformers"), batch=1, context=1024)
    assert _kernels(hf, "expert_gate_up_proj") == cfg.n_moe_layers


def test_static_cache_repeats_gqa_kv_under_hf_only():
    cfg = get_model("llama3-8b")
    hf = get_stack("hf-transformers")
    kw = dict(batch=64, context=1024, kv_cache="static", max_cache_len=1040)
    with_repeat = decode_breakdown(H200, EFF, cfg, hf, **kw)
    without = decode_breakdown(H200, EFF, cfg, dataclasses.replace(hf, repeat_kv_masked=False),
                               **kw)
    assert _kernels(with_repeat, "repeat_kv") == 2 * cfg.n_layers
    assert _kernels(without, "repeat_kv") == 0
    dynamic = decode_breakdown(H200, EFF, cfg, hf, batch=64, context=1024)
    assert _kernels(dynamic, "repeat_kv") == 0  # no mask: enable_gqa
    gpu = lambda bd: sum(i.time_s for i in bd.items if i.category != "launch")  # noqa: E731
    assert gpu(with_repeat) > gpu(without) * 1.2


def test_device_overlap_moves_between_max_and_sum():
    def total(overlap):
        cost = launch_cost(1000, 5e-3, EFF, cuda_graph=False, extra_host_s=20e-3, overlap=overlap)
        return 5e-3 + cost.total_s
    host_s = 1000 * EFF.host_launch_s + 20e-3
    assert total(1.0) == pytest.approx(max(host_s, 5e-3 + 1000 * EFF.graph_launch_s), rel=1e-9)
    assert total(0.0) == pytest.approx(5e-3 + host_s + 1000 * EFF.graph_launch_s, rel=1e-9)
    with pytest.raises(GpuplanError, match="device_overlap"):
        HostModel(device_overlap=1.5)


def test_hf_decode_now_grows_with_batch_and_context():
    cfg = get_model("llama3-8b")
    hf = get_stack("hf-transformers")
    small = decode_breakdown(H200, EFF, cfg, hf, batch=1, context=1024).total_s
    big = decode_breakdown(H200, EFF, cfg, hf, batch=64, context=4096).total_s
    # both pay cuDNN's graph build once (a dynamic cache's new length): the rest grows
    plan = hf.host.attention_plan_s * hf.host.speed_factor
    assert hf.host.device_overlap < 1 and big - plan > (small - plan) * 1.1




def test_math_sdpa_runs_in_fp32_and_repeats_gqa_kv():
    from gpuplan.hwmodels.attention import math_attention_time
    from gpuplan.workloads.ops import Attention

    def op(heads_kv, dtype="bf16"):
        return Attention(name="a", batch=2, heads_q=32, heads_kv=heads_kv, seq_q=2048,
                         seq_kv=2048, head_dim=128, v_head_dim=128, causal=False, pass_="fwd",
                         dtype=dtype)
    t = math_attention_time(H200, op(32), EFF)
    flops = 2 * 2 * 32 * 2048 * 2048 * 256
    fp32_rate = H200.peak("fp32") * EFF.gemm_fraction("fp32")
    assert t.compute_s >= flops / fp32_rate * 0.99  # not the bf16 tensor-core rate
    assert math_attention_time(H200, op(8), EFF).memory_s > t.memory_s  # the repeated K/V
