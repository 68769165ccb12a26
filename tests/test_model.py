"""ModelConfig: validation that prints the numbers, and the derived sizes."""

from __future__ import annotations

import dataclasses

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.workloads.model import ModelConfig

LLAMA = ModelConfig(
    name="tiny", n_layers=4, d_model=64, n_heads=8, n_kv_heads=2, d_ff=176, vocab_size=128
)
MOE = dataclasses.replace(
    LLAMA, n_experts=8, top_k=2, n_shared_experts=1, d_ff_expert=32, n_dense_layers=1
)
MLA = dataclasses.replace(
    LLAMA,
    n_kv_heads=8,
    q_lora_rank=24,
    kv_lora_rank=16,
    qk_nope_head_dim=8,
    qk_rope_head_dim=4,
    v_head_dim=12,
)
VIT = ModelConfig(
    name="vit",
    n_layers=2,
    d_model=64,
    n_heads=4,
    n_kv_heads=4,
    d_ff=256,
    vocab_size=0,
    norm="layernorm",
    activation="gelu",
    bias=True,
    position="learned",
    causal=False,
    patch_size=14,
    image_size=224,
)


def test_head_dim_defaults_to_d_model_over_heads():
    assert LLAMA.head_dim == 8
    assert dataclasses.replace(LLAMA, d_head=16).head_dim == 16


def test_attention_kind_follows_the_kv_heads():
    assert LLAMA.attention_kind == "gqa"
    assert dataclasses.replace(LLAMA, n_kv_heads=8).attention_kind == "mha"
    assert dataclasses.replace(LLAMA, n_kv_heads=1).attention_kind == "mqa"
    assert MLA.attention_kind == "mla"


def test_mla_query_and_key_heads_have_nope_plus_rope_elements():
    assert MLA.qk_head_dim == 12
    assert MLA.v_dim_per_head == 12
    assert dataclasses.replace(MLA, v_head_dim=20).v_dim_per_head == 20
    assert LLAMA.qk_head_dim == LLAMA.v_dim_per_head == LLAMA.head_dim


def test_leading_dense_layers_are_not_moe():
    assert [MOE.is_moe_layer(i) for i in range(4)] == [False, True, True, True]
    assert MOE.n_moe_layers == 3
    assert LLAMA.n_moe_layers == 0 and not LLAMA.is_moe


def test_moe_layer_freq_keeps_every_nth_layer_after_the_dense_ones():
    cfg = dataclasses.replace(MOE, n_layers=6, moe_layer_freq=2)
    assert [cfg.is_moe_layer(i) for i in range(6)] == [False, False, True, False, True, False]


def test_a_layer_outside_the_model_is_an_error():
    with pytest.raises(GpuplanError, match="layer=4 is invalid: choose 0 to 3"):
        MOE.is_moe_layer(4)


def test_vision_sequence_is_patches_plus_a_class_token():
    assert VIT.is_vision and not VIT.causal
    assert VIT.n_patches == 256
    assert VIT.seq_len_default == 257
    assert LLAMA.seq_len_default == LLAMA.max_seq_len


def test_heads_not_a_multiple_of_kv_heads_is_an_error_with_the_numbers():
    with pytest.raises(GpuplanError, match="n_heads=8 is not a multiple of n_kv_heads=3"):
        dataclasses.replace(LLAMA, n_kv_heads=3)


def test_d_model_not_divisible_by_heads_needs_an_explicit_head_size():
    with pytest.raises(GpuplanError, match="d_model=60 is not a multiple of n_heads=8"):
        dataclasses.replace(LLAMA, d_model=60)
    assert dataclasses.replace(LLAMA, d_model=60, d_head=8).head_dim == 8


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("norm", "batchnorm", "norm='batchnorm' is invalid: choose one of rmsnorm, layernorm"),
        ("activation", "relu", "activation='relu' is invalid: choose one of swiglu, gelu"),
        ("position", "alibi", "position='alibi' is invalid: choose one of rope, learned, none"),
        ("n_layers", 0, "n_layers=0 is invalid: it must be greater than zero"),
        ("d_ff", -1, "d_ff=-1 is invalid"),
        ("vocab_size", 0, "vocab_size=0 is invalid"),
        ("d_head", 0, "d_head=0 is invalid"),
        ("max_seq_len", 0, "max_seq_len=0 is invalid"),
    ],
)
def test_an_invalid_field_is_an_error_naming_it(field, value, message):
    with pytest.raises(GpuplanError, match=message):
        dataclasses.replace(LLAMA, **{field: value})


def test_top_k_above_the_expert_count_is_an_error():
    with pytest.raises(GpuplanError, match="top_k=9 is larger than n_experts=8"):
        dataclasses.replace(MOE, top_k=9)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"top_k": 2}, "top_k=2 is set but n_experts=0"),
        ({"d_ff_expert": 32}, "d_ff_expert=32 is set but n_experts=0"),
        ({"router_score_bias": True}, "router_score_bias=True is set but n_experts=0"),
        ({"q_lora_rank": 16}, "q_lora_rank=16 is set but kv_lora_rank=0"),
        ({"v_head_dim": 16}, "v_head_dim=16 is set but kv_lora_rank=0"),
        ({"image_size": 224}, "image_size=224 is set but patch_size=0"),
    ],
)
def test_a_feature_half_set_is_an_error(fields, message):
    with pytest.raises(GpuplanError, match=message):
        dataclasses.replace(LLAMA, **fields)


def test_moe_without_top_k_or_expert_width_is_an_error():
    with pytest.raises(GpuplanError, match="top_k=0 is invalid"):
        dataclasses.replace(MOE, top_k=0)
    with pytest.raises(GpuplanError, match="d_ff_expert=0 is invalid"):
        dataclasses.replace(MOE, d_ff_expert=0)


def test_moe_with_no_moe_layer_left_is_an_error():
    with pytest.raises(GpuplanError, match="n_dense_layers=4 leaves no MoE layer"):
        dataclasses.replace(MOE, n_dense_layers=4)
    with pytest.raises(GpuplanError, match="moe_layer_freq=5"):
        dataclasses.replace(MOE, moe_layer_freq=5)


def test_mla_needs_one_kv_head_per_query_head_and_a_rope_part():
    with pytest.raises(GpuplanError, match="n_kv_heads=2 must equal n_heads=8"):
        dataclasses.replace(MLA, n_kv_heads=2)
    with pytest.raises(GpuplanError, match="qk_rope_head_dim=0 is invalid"):
        dataclasses.replace(MLA, qk_rope_head_dim=0)


def test_vision_encoder_checks_its_image_and_vocabulary():
    with pytest.raises(GpuplanError, match="image_size=200 is not a multiple of patch_size=14"):
        dataclasses.replace(VIT, image_size=200)
    with pytest.raises(GpuplanError, match="vocab_size=100 is invalid for a vision encoder"):
        dataclasses.replace(VIT, vocab_size=100)
    with pytest.raises(GpuplanError, match="image_size=0 is invalid"):
        dataclasses.replace(VIT, image_size=0)


def test_a_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        LLAMA.n_layers = 8  # type: ignore[misc]
