"""The model catalogue: keys, sources, look-up by key or path, and the table."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.workloads.presets import PRESETS, get_model, list_models, models_frame

HF = Path(__file__).parent / "data" / "hf"

KEYS = {
    "gpt3-175b",
    *(
        f"megatron-gpt-{size}"
        for size in ("1.7b", "3.6b", "7.5b", "18.4b", "39.1b", "76.1b", "145.6b")
    ),
    *(f"megatron-gpt-{size}" for size in ("310.1b", "529.6b", "1t")),
    "llama2-7b",
    "llama2-13b",
    "llama2-70b",
    "llama3-8b",
    "llama3.2-3b",
    "llama3-70b",
    "llama3.1-405b",
    "mixtral-8x7b",
    "mixtral-8x22b",
    "deepseek-v3",
    "qwen2.5-72b",
    "vit-l-14",
    "qwen2-vl-7b",  # vision-language models (workloads.vision)
    "llama3.2-11b-vision",
    # read from committed config.json files (workloads/data/hf_presets)
    "qwen3-235b-a22b", "llama4-maverick", "gpt-oss-120b", "kimi-k2",
}


def test_the_config_presets_are_the_readers_answer_for_their_files():
    """One path: a config preset is what `--model <its config.json>` reads, renamed."""
    import dataclasses

    from gpuplan.workloads.presets import _CONFIG_PRESETS

    folder = Path(__file__).parents[1] / "gpuplan" / "workloads" / "data" / "hf_presets"
    for key in _CONFIG_PRESETS:
        read = get_model(str(folder / f"{key}.json"))
        assert dataclasses.replace(read, name=key, source="") == dataclasses.replace(
            PRESETS[key], source="")


def test_the_wide_ep_presets_have_their_published_sizes():
    """Totals and active parameters as their model cards give them (Qwen3 report Table 2:
    235B/22B; Kimi-K2 card: 1T/32B; gpt-oss card: 117B/5.1B; Llama 4 card: 400B/17B)."""
    from gpuplan.workloads.params import count_params

    cards = {"qwen3-235b-a22b": (235e9, 22e9), "kimi-k2": (1.0e12, 32e9),
             "gpt-oss-120b": (117e9, 5.1e9), "llama4-maverick": (400e9, 17e9)}  # fmt: skip
    for key, (total, active) in cards.items():
        p = count_params(PRESETS[key])
        assert p.total == pytest.approx(total, rel=0.03), key
        assert p.active == pytest.approx(active, rel=0.12), key
    assert PRESETS["kimi-k2"].checkpoint_weight_dtype == "fp8"
    assert PRESETS["gpt-oss-120b"].expert_weight_dtype == "mxfp4"


def test_the_catalogue_has_exactly_the_documented_keys():
    assert set(PRESETS) == KEYS


def test_every_preset_names_its_source_and_itself():
    for key, cfg in PRESETS.items():
        assert cfg.source, key
        assert cfg.name == key


def test_keys_are_case_insensitive():
    assert get_model("Llama3-8B") is PRESETS["llama3-8b"]


def test_an_unknown_key_lists_the_nearest_ones():
    with pytest.raises(GpuplanError, match="unknown model 'llama3-7b'; did you mean") as err:
        get_model("llama3-7b")
    assert "llama3-8b" in str(err.value).split("(known")[0]


def test_a_config_json_path_or_its_directory_is_read():
    from_file = get_model(str(HF / "llama3-8b" / "config.json"))
    from_dir = get_model(str(HF / "llama3-8b"))
    assert from_file == from_dir
    assert from_dir.name == "llama3-8b"


def test_a_missing_config_path_is_an_error():
    with pytest.raises(GpuplanError, match="is not a file"):
        get_model(str(HF / "nowhere.json"))


def test_presets_are_the_published_shapes():
    llama = PRESETS["llama3.1-405b"]
    assert (llama.n_layers, llama.d_model, llama.n_kv_heads, llama.d_ff) == (126, 16384, 8, 53248)
    mixtral = PRESETS["mixtral-8x22b"]
    shape = (mixtral.n_layers, mixtral.d_model, mixtral.n_heads, mixtral.n_kv_heads)
    assert shape == (56, 6144, 48, 8)
    experts = (mixtral.d_ff_expert, mixtral.vocab_size, mixtral.n_experts, mixtral.top_k)
    assert experts == (16384, 32768, 8, 2)
    deepseek = PRESETS["deepseek-v3"]
    assert deepseek.attention_kind == "mla" and deepseek.qk_head_dim == 192
    assert deepseek.n_moe_layers == 58
    assert PRESETS["qwen2.5-72b"].qkv_bias and not PRESETS["qwen2.5-72b"].bias
    gpt3 = PRESETS["gpt3-175b"]
    assert (gpt3.head_dim, gpt3.d_ff, gpt3.max_seq_len) == (128, 4 * 12288, 2048)
    assert gpt3.tied_embeddings and gpt3.position == "learned" and gpt3.norm == "layernorm"
    assert PRESETS["megatron-gpt-1t"].vocab_size == 51200


def test_vit_l_14_is_a_non_causal_encoder_of_257_tokens():
    vit = PRESETS["vit-l-14"]
    assert vit.is_vision and not vit.causal
    assert vit.seq_len_default == 257
    assert vit.vocab_size == 0


def test_list_models_returns_every_preset():
    assert list_models() == list(PRESETS.values())


def test_models_frame_has_one_row_per_preset_with_parameter_counts():
    frame = models_frame()
    assert list(frame["key"]) == list(PRESETS)
    row = frame.set_index("key").loc["mixtral-8x7b"]
    assert row["params_total"] == 46_702_792_704
    assert row["params_active"] == 12_879_925_248
    assert row["attention_kind"] == "gqa"
    assert (frame["params_active"] <= frame["params_total"]).all()


def test_windowed_blocks_per_full_one_without_a_window_is_a_one_line_error():
    import dataclasses

    with pytest.raises(GpuplanError, match="local_per_global=5 needs a sliding_window > 0"):
        dataclasses.replace(get_model("llama3-8b"), local_per_global=5)
