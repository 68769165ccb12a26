"""Layer 1: operators of forward and backward passes, their FLOPs and bytes, and memory."""

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.errors import GpuplanError
from gpuplan.workloads.memory import (
    kv_cache_bytes_per_token,
    layer_activation_bytes,
    training_state_bytes,
)
from gpuplan.workloads.model import ModelConfig
from gpuplan.workloads.operators import backward_of, layer_forward, training_flops
from gpuplan.workloads.ops import Attention, Elementwise, Gemm
from gpuplan.workloads.params import count_params
from gpuplan.workloads.presets import get_model

SMALL = ModelConfig(
    name="small", n_layers=2, d_model=256, n_heads=8, n_kv_heads=2, d_ff=512, vocab_size=1000
)


def test_gpt3_training_flops_per_token_match_narayanan_eq3_within_one_percent():
    # Narayanan et al. 2021, eq. 3 without recomputation: 72 l h^2 (1 + s/6h) + 6 V h per
    # token; they count the whole s x s score matrix, so the mask is off here.
    cfg, s = get_model("gpt3-175b"), 2048
    per_token = training_flops(replace(cfg, causal=False), batch=1, seq=s) / s
    n_layers, h, v = cfg.n_layers, cfg.d_model, cfg.vocab_size
    six_n_plus_attention = 6 * count_params(cfg).total + 12 * n_layers * s * h
    assert per_token == pytest.approx(six_n_plus_attention, rel=0.01)
    assert per_token == pytest.approx(
        72 * n_layers * h * h * (1 + s / (6 * h)) + 6 * v * h, rel=0.01
    )


def test_a_causal_mask_halves_the_attention_flops():
    full = Attention(
        name="a",
        batch=1,
        heads_q=8,
        heads_kv=8,
        seq_q=4096,
        seq_kv=4096,
        head_dim=128,
        v_head_dim=128,
        causal=False,
        pass_="fwd",
        dtype="bf16",
    )
    causal = replace(full, causal=True)
    assert causal.flops / full.flops == pytest.approx(0.5, rel=1e-3)


def test_flash_backward_executes_more_flops_than_the_model_needs():
    fwd = Attention(
        name="a",
        batch=2,
        heads_q=8,
        heads_kv=2,
        seq_q=512,
        seq_kv=512,
        head_dim=64,
        v_head_dim=64,
        causal=True,
        pass_="fwd",
        dtype="bf16",
    )
    bwd = replace(fwd, pass_="bwd")
    assert bwd.flops == pytest.approx(2.5 * fwd.flops)
    assert bwd.model_flops == pytest.approx(2 * fwd.flops)


def test_every_gemm_becomes_a_data_and_a_weight_gradient_of_equal_flops():
    fwd = layer_forward(SMALL, batch=2, seq=64)
    gemms = [op for op in fwd if isinstance(op, Gemm)]
    bwd = [op for op in backward_of(fwd) if isinstance(op, Gemm)]
    assert len(bwd) == 2 * len(gemms)
    assert sum(op.flops for op in bwd) == pytest.approx(2 * sum(op.flops for op in gemms))


def test_the_backward_of_an_add_launches_no_kernel():
    add = Elementwise(name="r", op="add", tokens=10, hidden=10, pass_="fwd", dtype="bf16")
    (grad,) = backward_of([add])
    assert grad.bytes == 0 and grad.kernels == 0


def test_eager_silu_mul_moves_more_bytes_in_more_kernels_than_a_fused_one():
    fused = Elementwise(name="s", op="silu_mul", tokens=128, hidden=1024, pass_="fwd", dtype="bf16")
    eager = replace(fused, impl="eager")
    assert eager.bytes > fused.bytes and eager.kernels > fused.kernels


def test_a_tensor_parallel_degree_that_does_not_divide_the_heads_is_an_error():
    with pytest.raises(GpuplanError, match="tp=3 does not divide n_heads=8"):
        layer_forward(SMALL, batch=1, seq=16, tp=3)


def test_llama3_8b_kv_cache_is_128_kib_per_token_in_bf16():
    # 2 (K, V) x 32 layers x 8 KV heads x 128 dims x 2 bytes = 131,072 B
    assert kv_cache_bytes_per_token(get_model("llama3-8b"), "bf16") == 131_072


def test_deepseek_v3_caches_the_mla_latent_only():
    # 61 layers x (512 latent + 64 RoPE key) x 2 bytes (DeepSeek-V2 report, sec. 2.1.3)
    assert kv_cache_bytes_per_token(get_model("deepseek-v3"), "bf16") == 61 * 576 * 2


def test_fp8_kv_cache_is_half_of_bf16():
    cfg = get_model("llama2-7b")
    assert kv_cache_bytes_per_token(cfg, "fp8") * 2 == kv_cache_bytes_per_token(cfg, "bf16")


def test_bf16_mixed_adam_state_is_sixteen_bytes_per_parameter():
    assert training_state_bytes(1_000, "bf16-mixed").total_bytes == 16_000
    assert training_state_bytes(1_000, "bf16-mixed-megatron").total_bytes == 18_000


def test_an_unknown_precision_is_an_error_listing_the_valid_ones():
    with pytest.raises(GpuplanError, match="precision='fp4'.*bf16-mixed"):
        training_state_bytes(1, "fp4")


def test_full_recomputation_keeps_only_the_block_input():
    cfg = get_model("llama3-8b")
    full = layer_activation_bytes(cfg, tokens=4096, recompute="full")
    assert full.total_bytes == 4096 * cfg.d_model * 2


@settings(max_examples=40, deadline=None)
@given(tokens=st.integers(1, 10_000), tp=st.sampled_from([1, 2, 4, 8]))
def test_recomputation_never_keeps_more_than_none(tokens, tp):
    cfg = get_model("llama3-8b")
    sizes = [
        layer_activation_bytes(cfg, tokens=tokens, recompute=r, tp=tp).total_bytes
        for r in ("none", "selective", "full")
    ]
    assert sizes[0] >= sizes[1] >= sizes[2] > 0


@settings(max_examples=40, deadline=None)
@given(tokens=st.integers(1, 10_000))
def test_sequence_parallelism_never_keeps_more_than_tensor_parallelism_alone(tokens):
    cfg = get_model("llama3-70b")
    tp = layer_activation_bytes(cfg, tokens=tokens, tp=8).total_bytes
    sp = layer_activation_bytes(cfg, tokens=tokens, tp=8, sp=True).total_bytes
    assert sp <= tp < layer_activation_bytes(cfg, tokens=tokens).total_bytes


def test_moe_layers_route_tokens_to_balanced_experts():
    cfg = get_model("mixtral-8x7b")
    ops = layer_forward(cfg, batch=1, seq=1024, layer=0)
    experts = [op for op in ops if isinstance(op, Gemm) and op.name.startswith("expert_")]
    assert experts and all(op.count == 8 and op.m == 1024 * 2 // 8 for op in experts)


def test_deepseek_leading_layers_are_dense():
    cfg = get_model("deepseek-v3")
    dense = {op.name for op in layer_forward(cfg, batch=1, seq=8, layer=0)}
    moe = {op.name for op in layer_forward(cfg, batch=1, seq=8, layer=3)}
    assert "router" not in dense and "router" in moe


def test_korthikanti_gpt3_activations_match_the_papers_equations():
    from gpuplan.workloads.memory import korthikanti_activation_bytes

    cfg = get_model("gpt3-175b")  # s=2048, h=12288, a=96; eq. 1: sbh(34 + 5as/h)
    s, h, a = 2048, 12288, 96
    assert korthikanti_activation_bytes(cfg, seq=s, micro_batch=1) == s * h * (34 + 5 * a * s / h)
    tp_sp = korthikanti_activation_bytes(
        cfg, seq=s, micro_batch=1, tp=8, sp=True, recompute="selective"
    )
    assert tp_sp == s * h * 34 / 8
