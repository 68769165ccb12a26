"""Reading Hugging Face config.json files: each family, and the errors a user can meet.

Fixtures in tests/data/hf: real configs (Llama-2-7B, Llama-3-8B, Mistral-7B-v0.1,
Mixtral-8x7B, Qwen2.5-72B, DeepSeek-V3, GPT-2 124M) and small made-up ones.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.errors import GpuplanError
from gpuplan.workloads.hf_config import SUPPORTED_MODEL_TYPES, from_hf_config
from gpuplan.workloads.params import count_params
from gpuplan.workloads.presets import PRESETS

HF = Path(__file__).parent / "data" / "hf"


def _shape(cfg):
    """Every field but the name and the source."""
    return dataclasses.replace(cfg, name="", source="")


@pytest.mark.parametrize(
    "key", ["llama2-7b", "llama3-8b", "mixtral-8x7b", "qwen2.5-72b", "deepseek-v3"]
)
def test_a_real_config_reads_as_its_preset(key):
    cfg = from_hf_config(HF / key)
    assert _shape(cfg) == _shape(PRESETS[key])
    assert cfg.name == key
    assert "config.json" in cfg.source


def test_mistral_7b_reads_with_its_published_parameter_count():
    cfg = from_hf_config(HF / "mistral-7b" / "config.json")
    assert cfg.attention_kind == "gqa" and cfg.max_seq_len == 32768
    assert count_params(cfg).total == 7_241_732_096  # HF MistralForCausalLM, 7.24B


def test_gpt2_reads_as_124m_with_learned_positions_and_tied_head():
    cfg = from_hf_config(HF / "gpt2.json")
    assert cfg.name == "gpt2"
    assert (cfg.d_ff, cfg.max_seq_len) == (4 * 768, 1024)  # n_inner null -> 4 n_embd
    assert cfg.norm == "layernorm" and cfg.activation == "gelu" and cfg.bias
    assert cfg.tied_embeddings and cfg.position == "learned"
    assert count_params(cfg).total == 124_439_808  # HF GPT2LMHeadModel


def test_gpt2_n_inner_sets_the_ffn_width():
    assert from_hf_config(HF / "tiny-gpt2.json").d_ff == 96


def test_tiny_llama_keeps_gqa_and_tied_embeddings():
    cfg = from_hf_config(HF / "tiny-llama.json")
    assert (cfg.n_heads, cfg.n_kv_heads, cfg.head_dim) == (8, 2, 8)
    assert cfg.tied_embeddings and count_params(cfg).lm_head == 0
    assert count_params(cfg).total == 140_736  # HF LlamaForCausalLM of this config


def test_qwen2_has_biases_on_q_k_v_only():
    cfg = from_hf_config(HF / "tiny-qwen2.json")
    assert cfg.qkv_bias and not cfg.bias
    assert count_params(cfg).total == 92_736  # HF Qwen2ForCausalLM of this config


def test_mixtral_experts_have_the_intermediate_width():
    cfg = from_hf_config(HF / "tiny-mixtral.json")
    assert (cfg.n_experts, cfg.top_k, cfg.d_ff_expert, cfg.n_moe_layers) == (4, 2, 96, 2)
    assert count_params(cfg).total == 185_664  # HF MixtralForCausalLM of this config


def test_deepseek_v2_without_query_compression():
    cfg = from_hf_config(HF / "tiny-deepseek-v2.json")
    assert cfg.is_mla and cfg.q_lora_rank == 0
    assert not cfg.router_score_bias  # topk_method greedy: no score bias
    assert (cfg.n_dense_layers, cfg.n_moe_layers, cfg.n_shared_experts) == (1, 2, 2)
    assert count_params(cfg).total == 187_680  # HF DeepseekV2ForCausalLM of this config


def test_deepseek_v3_reads_its_routing_and_mla_fields():
    cfg = from_hf_config(HF / "deepseek-v3")
    assert cfg.router_score_bias and cfg.q_lora_rank == 1536
    assert (cfg.qk_head_dim, cfg.v_dim_per_head, cfg.head_dim) == (192, 128, 128)


def test_a_dict_is_read_as_well_as_a_file():
    raw = json.loads((HF / "tiny-llama.json").read_text())
    assert _shape(from_hf_config(raw)) == _shape(from_hf_config(HF / "tiny-llama.json"))
    assert from_hf_config(raw, name="mine").name == "mine"


def test_optional_fields_take_the_transformers_defaults():
    raw = {
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "vocab_size": 50,
    }
    cfg = from_hf_config(raw)
    assert (cfg.n_kv_heads, cfg.max_seq_len, cfg.tied_embeddings) == (4, 2048, False)


def test_an_unknown_model_type_is_read_from_its_standard_fields_with_a_note():
    from gpuplan.workloads.hf_config import read_hf_config

    cfg, notes = read_hf_config(TINY | {"model_type": "my_new_llm"})
    assert _shape(cfg) == _shape(from_hf_config(TINY))
    assert any("'my_new_llm' is not in the traits table" in note for note in notes)
    with pytest.raises(GpuplanError, match="required field 'hidden_size' is missing"):
        from_hf_config({"model_type": "bert"})
    assert "gpt_oss" in SUPPORTED_MODEL_TYPES and "nemotron_h" in SUPPORTED_MODEL_TYPES


def test_a_missing_field_is_an_error_naming_it_and_the_file(tmp_path):
    raw = json.loads((HF / "tiny-llama.json").read_text())
    del raw["hidden_size"]
    file = tmp_path / "config.json"
    file.write_text(json.dumps(raw))
    with pytest.raises(GpuplanError, match=r"config\.json: required field 'hidden_size'"):
        from_hf_config(file)


def test_a_missing_model_type_is_an_error():
    with pytest.raises(GpuplanError, match="required field 'model_type' is missing"):
        from_hf_config({"hidden_size": 64})


def test_a_file_that_is_not_json_is_an_error(tmp_path):
    file = tmp_path / "config.json"
    file.write_text("{not json")
    with pytest.raises(GpuplanError, match="cannot read it as JSON"):
        from_hf_config(file)
    file.write_text("[1, 2]")
    with pytest.raises(GpuplanError, match="holds one JSON object, not list"):
        from_hf_config(file)


def test_a_directory_without_config_json_is_an_error(tmp_path):
    with pytest.raises(GpuplanError, match="config.json' is not a file"):
        from_hf_config(tmp_path)


def test_attention_and_mlp_biases_are_read_apart():
    raw = json.loads((HF / "tiny-llama.json").read_text())
    attention = from_hf_config(raw | {"attention_bias": True})
    assert attention.attention_bias and not attention.mlp_bias and not attention.bias
    both = from_hf_config(raw | {"attention_bias": True, "mlp_bias": True})
    plain = count_params(from_hf_config(raw)).total
    d, q, kv, ffn, layers = 64, 8 * 8, 2 * 8, 176, 3  # tiny-llama: q, k, v, o and MLP widths
    assert count_params(attention).total == plain + layers * (q + 2 * kv + d)
    assert count_params(both).total == plain + layers * (q + 2 * kv + d + 2 * ffn + d)
    deepseek = json.loads((HF / "tiny-deepseek-v2.json").read_text())
    with pytest.raises(GpuplanError, match="attention_bias=True is not supported"):
        from_hf_config(deepseek | {"attention_bias": True})


def test_an_invalid_shape_in_the_file_is_reported_by_the_model_check():
    raw = json.loads((HF / "tiny-llama.json").read_text())
    with pytest.raises(GpuplanError, match="n_heads=8 is not a multiple of n_kv_heads=3"):
        from_hf_config(raw | {"num_key_value_heads": 3})


# -- every wrong value a user can meet: one line naming the key and the value -----------------
TINY = json.loads((HF / "tiny-llama.json").read_text())


@pytest.mark.parametrize(
    ("key", "value"),
    [("num_hidden_layers", "32"), ("num_hidden_layers", 2.5), ("num_hidden_layers", True),
     ("num_hidden_layers", [2]), ("num_hidden_layers", 0), ("num_hidden_layers", -4),
     ("num_hidden_layers", 10**30), ("hidden_size", False), ("vocab_size", {"n": 1}),
     ("num_key_value_heads", "2"), ("head_dim", 8.5), ("tie_word_embeddings", "false"),
     ("tie_word_embeddings", 1), ("attention_bias", "no"), ("model_type", 5)],
)  # fmt: skip
def test_a_value_of_the_wrong_type_is_one_line_naming_the_key_and_the_value(key, value):
    with pytest.raises(GpuplanError) as err:
        from_hf_config(TINY | {key: value})
    message = str(err.value)
    assert f"{key}={value!r}"[:30] in message and "\n" not in message


def test_a_whole_number_written_as_a_float_is_read_as_that_number():
    cfg = from_hf_config(TINY | {"num_hidden_layers": 2.0})
    assert cfg.n_layers == 2 and isinstance(cfg.n_layers, int)


def test_moe_and_mla_fields_are_checked_too():
    raw = json.loads((HF / "tiny-deepseek-v2.json").read_text())
    for key, value in (("n_routed_experts", "4"), ("kv_lora_rank", None), ("q_lora_rank", 1.5),
                       ("topk_method", 3), ("first_k_dense_replace", -1)):  # fmt: skip
        with pytest.raises(GpuplanError, match=key):
            from_hf_config(raw | {key: value})


@pytest.mark.parametrize("text", ["3", "null", '"llama"', "[]", "{", ""])
def test_a_file_that_is_not_one_json_object_is_one_line(tmp_path, text):
    file = tmp_path / "config.json"
    file.write_text(text)
    with pytest.raises(GpuplanError) as err:
        from_hf_config(file)
    assert str(file) in str(err.value) and "\n" not in str(err.value)


def test_a_binary_file_is_one_line_saying_it_is_not_utf8(tmp_path):
    file = tmp_path / "config.json"
    file.write_bytes(b'{"model_type": "\xff\xfe"}')
    with pytest.raises(GpuplanError, match="not UTF-8"):
        from_hf_config(file)


def test_something_that_is_neither_a_path_nor_a_dict_is_an_error():
    with pytest.raises(GpuplanError, match="config=list is invalid"):
        from_hf_config([TINY])


def test_the_command_line_reports_a_bad_config_in_one_line_with_exit_code_2(tmp_path, capsys):
    from gpuplan.cli import main

    file = tmp_path / "config.json"
    file.write_text(json.dumps(TINY | {"num_hidden_layers": True}))
    assert main(["models", "--hf-config", str(file)]) == 2
    err = capsys.readouterr().err
    assert "num_hidden_layers=True" in err and err.count("\n") == 1


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                 max_size=3),  # fmt: skip
    max_leaves=6,
)


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(changes=st.dictionaries(st.sampled_from(sorted(TINY) + ["n_routed_experts", "q_lora_rank",
                                                               "kv_lora_rank", "mlp_bias"]),
                               JSON_VALUES, max_size=4),
       model_type=st.sampled_from(SUPPORTED_MODEL_TYPES))  # fmt: skip
def test_any_values_give_a_model_or_a_gpuplan_error_never_another_exception(changes, model_type):
    try:
        from_hf_config(TINY | {"model_type": model_type} | changes)
    except GpuplanError as err:
        assert "\n" not in str(err)


def test_a_number_json_cannot_hold_or_a_huge_integer_is_one_line(tmp_path):
    file = tmp_path / "config.json"
    file.write_text('{"model_type": "llama", "num_hidden_layers": ' + "9" * 5000 + "}")
    with pytest.raises(GpuplanError, match="cannot read it as JSON"):
        from_hf_config(file)
    with pytest.raises(GpuplanError, match="num_hidden_layers=an integer of about 5,001 digits"):
        from_hf_config(TINY | {"num_hidden_layers": 10**5000})
