"""Per-layer kinds: derivation from the older fields, explicit kinds, and one-line errors."""

import dataclasses

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.workloads.layer_kinds import (
    FFN_KINDS,
    MIXER_KINDS,
    LinearAttention,
    Mamba2,
    SparseIndexer,
    pattern,
)
from gpuplan.workloads.presets import _CONFIG_PRESETS, get_model, list_models

BASE = get_model("llama3-8b")
LINEAR = LinearAttention(n_key_heads=16, n_value_heads=32, key_head_dim=128, value_head_dim=128,
                         conv_kernel=4)
SSM = Mamba2(n_heads=128, head_dim=64, state_size=128, n_groups=8, conv_kernel=4, chunk_size=128)


def _old_windowed(cfg, i):
    """The rule before layer kinds existed (model.py's is_windowed_layer)."""
    if not cfg.sliding_window:
        return False
    return not cfg.local_per_global or (i + 1) % (cfg.local_per_global + 1) != 0


def _old_moe(cfg, i):
    return cfg.is_moe and i >= cfg.n_dense_layers and i % cfg.moe_layer_freq == 0


@pytest.mark.parametrize("cfg", [c for c in list_models() if c.name not in _CONFIG_PRESETS],
                         ids=lambda c: c.name)  # fmt: skip
def test_every_preset_derives_the_kinds_it_had_before(cfg):
    """The presets written in Python (those read from a config.json use layer kinds freely)."""
    want = tuple("sliding" if _old_windowed(cfg, i) else "full" for i in range(cfg.n_layers))
    assert cfg.layer_types == () and cfg.layer_kinds == want
    assert [cfg.is_moe_layer(i) for i in range(cfg.n_layers)] == [
        _old_moe(cfg, i) for i in range(cfg.n_layers)]
    assert {cfg.ffn_kind(i) for i in range(cfg.n_layers)} <= {"dense", "moe"}


@pytest.mark.parametrize(("window", "local", "expect"), [
    (0, 0, ("full",) * 6), (64, 0, ("sliding",) * 6),
    (64, 1, ("sliding", "full") * 3), (64, 2, ("sliding", "sliding", "full") * 2)])
def test_empty_layer_types_derive_todays_window_rule(window, local, expect):
    cfg = dataclasses.replace(BASE, n_layers=6, sliding_window=window, local_per_global=local)
    assert cfg.layer_kinds == expect
    assert [cfg.is_windowed_layer(i) for i in range(6)] == [k == "sliding" for k in expect]
    assert cfg.n_windowed_layers == expect.count("sliding")


def test_explicit_kinds_win_over_the_window_rule_and_ffn_types_over_the_moe_rule():
    kinds = ("linear", "linear", "linear", "full") * 2
    cfg = dataclasses.replace(BASE, n_layers=8, layer_types=kinds, linear_attention=LINEAR)
    assert cfg.layer_kinds == kinds and cfg.layer_kind(3) == "full"
    assert not any(cfg.is_windowed_layer(i) for i in range(8))
    moe = get_model("mixtral-8x7b")
    ffn = ("dense", "moe") * (moe.n_layers // 2)
    cfg = dataclasses.replace(moe, ffn_types=ffn)
    assert [cfg.is_moe_layer(i) for i in range(cfg.n_layers)] == [f == "moe" for f in ffn]
    assert cfg.n_moe_layers == moe.n_layers // 2


def test_a_layer_outside_the_model_is_an_error_for_every_accessor():
    for accessor in (BASE.layer_kind, BASE.ffn_kind, BASE.is_moe_layer, BASE.is_windowed_layer):
        with pytest.raises(GpuplanError, match="layer=32 is invalid: choose 0 to 31"):
            accessor(32)


@pytest.mark.parametrize(("changes", "message"), [
    (dict(layer_types=("full",) * 3), "layer_types has 3 entries but n_layers=4"),
    (dict(ffn_types=("dense",) * 5), "ffn_types has 5 entries but n_layers=4"),
    (dict(layer_types=("full", "full", "local", "full")),
     r"layer_types\[2\]='local' is invalid: choose one of full, sliding"),
    (dict(ffn_types=("dense", "dense", "mlp", "dense")), r"ffn_types\[2\]='mlp' is invalid"),
    (dict(layer_types=["full"] * 4), "layer_types=.* is invalid: give a tuple"),
    (dict(layer_types=("linear",) * 4), "'linear' layers, so linear_attention=None is invalid"),
    (dict(layer_types=("mamba2",) * 4), "'mamba2' layers, so ssm=None is invalid"),
    (dict(layer_types=("sliding",) * 4), "'sliding' layers, so sliding_window=0 is invalid"),
    (dict(layer_types=("chunked",) * 4), "'chunked' layers, so attention_chunk_size=0"),
    (dict(layer_types=("dsa",) * 4), "'dsa' layers, so sparse_indexer=None is invalid: it must "
                                     r"be set, with MLA \(kv_lora_rank > 0\)"),
    (dict(layer_types=("dsa",) * 4, sparse_indexer=SparseIndexer(n_heads=64, head_dim=128,
                                                                 top_k=2048)),
     "'dsa' layers, so sparse_indexer=.* with MLA"),
    (dict(ffn_types=("moe",) * 4), "ffn_types has 'moe' layers but n_experts=0"),
    (dict(attention_chunk_size=-1), "attention_chunk_size=-1 is invalid"),
])
def test_an_invalid_kind_layout_is_a_one_line_error_naming_the_field(changes, message):
    with pytest.raises(GpuplanError, match=message) as err:
        dataclasses.replace(BASE, n_layers=4, **changes)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("cls", "kw", "message"), [
    (LinearAttention, dict(n_key_heads=0, n_value_heads=32, key_head_dim=128, value_head_dim=128,
                           conv_kernel=4), "linear_attention: n_key_heads=0 is invalid"),
    (LinearAttention, dict(n_key_heads=3, n_value_heads=32, key_head_dim=128, value_head_dim=128,
                           conv_kernel=4), "n_value_heads=32 is not a multiple of n_key_heads=3"),
    (Mamba2, dict(n_heads=128, head_dim=64, state_size=128, n_groups=3, conv_kernel=4),
     "ssm: n_heads=128 is not a multiple of n_groups=3"),
    (SparseIndexer, dict(n_heads=64, head_dim=128, top_k=0), "sparse_indexer: top_k=0"),
])
def test_an_invalid_mixer_description_is_an_error_naming_the_field(cls, kw, message):
    with pytest.raises(GpuplanError, match=message):
        cls(**kw)


def test_every_kind_with_its_fields_is_accepted():
    dsv3 = get_model("deepseek-v3")
    cfg = dataclasses.replace(
        dsv3, n_layers=8, n_dense_layers=1, max_seq_len=8192, sliding_window=128,
        attention_chunk_size=8192, layer_types=MIXER_KINDS, ffn_types=("dense", "moe", "none") * 2
        + ("moe", "moe"), linear_attention=LINEAR, ssm=SSM,
        sparse_indexer=SparseIndexer(n_heads=64, head_dim=128, top_k=2048))
    assert cfg.layer_kinds == MIXER_KINDS
    assert {cfg.ffn_kind(i) for i in range(8)} == set(FFN_KINDS)


def test_the_state_sizes_follow_the_hf_modules():
    # Qwen3NextGatedDeltaNet: conv_dim = key_dim * 2 + value_dim; recurrent state per value head
    assert LINEAR.conv_channels == 2 * 16 * 128 + 32 * 128
    assert LINEAR.state_elements == 32 * 128 * 128
    assert LINEAR.conv_state_elements == 3 * LINEAR.conv_channels
    # Mamba2Mixer: conv_dim = intermediate_size + 2 * n_groups * ssm_state_size
    assert SSM.d_inner == 8192 and SSM.conv_channels == 8192 + 2 * 8 * 128
    assert SSM.state_elements == 128 * 64 * 128


@pytest.mark.parametrize(("kinds", "text"), [
    (("sliding", "full") * 21, "sliding×1/full×1 ×21"),
    (("full",) * 32, "full×32"),
    (("linear",) * 3 + ("full",) + ("linear",) * 3 + ("full",), "linear×3/full×1 ×2"),
    (("sliding",) * 5 + ("full",) + ("sliding",) * 5 + ("full",) + ("sliding",) * 2,
     "sliding×5/full×1 ×2 + sliding×2"),
    (("full", "full", "sliding"), "full×2/sliding×1"),
])
def test_the_pattern_is_the_repeating_unit_and_its_count(kinds, text):
    assert pattern(kinds) == text
