"""Every decoder family the reader knows, from a real config.json: its structure, and its
parameter count against the model card and an independent count.

Convention of gpuplan's counts (``workloads/params.py``): every parameter the Hugging Face model
stores, embeddings and an untied LM head included, the vision tower of a multimodal wrapper
left out where it is not read (Llama 4's; Gemma 3's is read and counted), MTP modules left out of ``total`` and counted apart (``mtp``);
``active`` keeps, in each MoE layer, the router, ``top_k`` routed experts and the shared ones,
and counts the embedding. Cards that leave out the input embedding from "active" (OpenAI,
DeepSeek, Zhipu) are compared with ``active - embedding``.

The independent count (``hf_tensor_shapes``) lists each family's tensors from its modeling
code and sums their shapes; it must agree within 0.1% (it agrees exactly). A card figure is
checked to the precision the card states it (rounded or cut to its last digit: Qwen's 3.3B
active is 3.35B cut), which is 0.1% or better only where the card gives four or more digits. Fixtures: tests/data/hf_configs/README.md.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import hf_tensor_shapes
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.errors import GpuplanError
from gpuplan.workloads.hf_config import read_hf_config
from gpuplan.workloads.params import count_params

CONFIGS = Path(__file__).parent / "data" / "hf_configs"
B = 10**9


@dataclass(frozen=True)
class Row:
    name: str  # fixture tests/data/hf_configs/<name>.json
    total: int  # gpuplan's count (recorded, so that a change shows)
    active: int
    card_total: float | None  # as the card states it; None: not comparable (see why)
    card_active: float | None = None
    card_step: float = 0.01 * B  # the card's last digit (the figure is rounded or cut to it)
    card: str = ""  # where the card figure comes from; and what it counts
    plus_mtp: bool = False  # the card's total includes the MTP modules
    active_step: float = 0.0  # the active figure's last digit, where it differs from card_step
    active_without_embedding: bool = False  # the card's "active" leaves out the token table


HUB = "https://huggingface.co/"
ROWS = [
    Row("llama-3.1-8b", 8_030_261_248, 8_030_261_248, 8.03 * B,
        card=HUB + "meta-llama/Llama-3.1-8B (Hub safetensors: 8.03B params)"),
    Row("qwen1.5-moe-a2.7b", 14_315_784_192, 2_689_173_504, 14.3 * B, 2.7 * B, 0.1 * B,
        card=HUB + "Qwen/Qwen1.5-MoE-A2.7B (14.3B total, 2.7B activated)"),
    Row("qwen3-8b", 8_190_735_360, 8_190_735_360, 8.2 * B, card_step=0.1 * B,
        card=HUB + "Qwen/Qwen3-8B (Number of Parameters: 8.2B)"),
    Row("qwen3-30b-a3b", 30_532_122_624, 3_353_032_704, 30.5 * B, 3.3 * B, 0.1 * B,
        card=HUB + "Qwen/Qwen3-30B-A3B (30.5B in total and 3.3B activated)"),
    Row("qwen3-next-80b-a3b", 79_674_391_296, 3_874_929_408, 80 * B, 3 * B, 1 * B,
        card=HUB + "Qwen/Qwen3-Next-80B-A3B-Instruct (80B in total and 3B activated)",
        active_without_embedding=True),
    Row("gemma-7b", 8_537_680_896, 8_537_680_896, 8.54 * B,
        card=HUB + "google/gemma-7b (Hub safetensors: 8.54B params)"),
    Row("gemma-2-9b", 9_241_705_984, 9_241_705_984, 9.24 * B,
        card=HUB + "google/gemma-2-9b (Hub safetensors: 9.24B params)"),
    Row("gemma-3-1b", 999_885_952, 999_885_952, 1.0 * B, card_step=0.1 * B,
        card=HUB + "google/gemma-3-1b-pt (1B; text only, no vision tower)"),
    Row("gemma-3-4b", 4_300_079_472, 4_300_079_472, 4.3 * B, card_step=0.1 * B,
        card=HUB + "google/gemma-3-4b-pt (Hub safetensors: 4.3B params, SigLIP tower in)"),
    Row("gemma-3-27b", 27_432_406_640, 27_432_406_640, 27.4 * B, card_step=0.1 * B,
        card=HUB + "google/gemma-3-27b-pt (Hub safetensors: 27.4B params, SigLIP tower in)"),
    Row("phi-3-mini-4k", 3_821_079_552, 3_821_079_552, 3.8 * B, card_step=0.1 * B,
        card=HUB + "microsoft/Phi-3-mini-4k-instruct (3.8B parameters)"),
    Row("phi-3.5-mini", 3_821_079_552, 3_821_079_552, 3.8 * B, card_step=0.1 * B,
        card=HUB + "microsoft/Phi-3.5-mini-instruct (3.8B parameters)"),
    Row("phi-4", 14_659_507_200, 14_659_507_200, 14 * B, card_step=1 * B,
        card=HUB + "microsoft/phi-4 (14B parameters, dense decoder-only)"),
    Row("llama-4-scout-17b-16e", 107_769_861_120, 17_172_894_720, None, 17 * B, 1 * B,
        card=HUB + "meta-llama/Llama-4-Scout-17B-16E (17B activated; its 109B total counts "
        "the vision encoder, which is not read)"),
    Row("llama-4-maverick-17b-128e", 400_711_848_960, 17_184_691_200, None, 17 * B, 1 * B,
        card=HUB + "meta-llama/Llama-4-Maverick-17B-128E (17B activated; 400B total with "
        "the vision encoder, which is not read)"),
    Row("gpt-oss-20b", 20_914_757_184, 4_187_440_704, 20.91 * B, 3.61 * B,
        card="OpenAI gpt-oss model card, arXiv:2508.10925, Table 1 (20.91B total, 3.61B "
        "active without the embedding)", active_without_embedding=True),
    Row("gpt-oss-120b", 116_829_156_672, 5_711_982_912, 116.83 * B, 5.13 * B,
        card="OpenAI gpt-oss model card, arXiv:2508.10925, Table 1 (116.83B total, 5.13B "
        "active without the embedding)", active_without_embedding=True),
    Row("kimi-k2", 1_026_408_232_448, 32_861_500_928, 1000 * B, 32 * B, 1000 * B,
        active_step=1 * B,
        card=HUB + "moonshotai/Kimi-K2-Instruct (1 trillion total, 32 billion activated)",
        active_without_embedding=True),
    Row("deepseek-v3.2-exp", 671_877_944_064, 38_403_822_336, 685 * B, card_step=1 * B,
        card=HUB + "deepseek-ai/DeepSeek-V3.2-Exp (Hub: 685B params, MTP module included)",
        plus_mtp=True),
    # the card's 355B total is not matched: 352.8B without and 358.3B with the MTP module as
    # DeepSeek's layout stores it (its own token table and head); which it counts is not said
    Row("glm-4.5", 352_797_829_024, 33_632_266_144, None, 32 * B, 1 * B,
        card=HUB + "zai-org/GLM-4.5 (355B total, 32B active)", active_without_embedding=True),
    Row("glm-4.5-air", 106_852_251_264, 13_424_129_664, 106 * B, 12 * B, 1 * B,
        card=HUB + "zai-org/GLM-4.5-Air (106B total, 12B active)",
        active_without_embedding=True),
    Row("olmo-2-1124-7b", 7_298_617_344, 7_298_617_344, 7.3 * B, card_step=0.1 * B,
        card=HUB + "allenai/OLMo-2-1124-7B (Hub safetensors: 7.3B params)"),
    Row("granite-4.0-h-small", 32_207_337_984, 8_803_121_664, 32 * B, 9 * B, 1 * B,
        card=HUB + "ibm-granite/granite-4.0-h-small (32B total, 9B active)"),
    Row("nemotron-h-8b-base-8k", 8_100_852_736, 8_100_852_736, 8 * B, card_step=1 * B,
        card=HUB + "nvidia/Nemotron-H-8B-Base-8K (8B)"),
    Row("mamba-codestral-7b", 7_285_403_648, 7_285_403_648, 7.285403648 * B, card_step=1,
        card=HUB + "mistralai/Mamba-Codestral-7B-v0.1 (Number of parameters: 7,285,403,648)"),
]  # fmt: skip


def _read(name):
    return read_hf_config(CONFIGS / f"{name}.json")


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.name)
def test_parameter_counts_match_the_card_and_an_independent_count(row):
    cfg, _ = _read(row.name)
    params = count_params(cfg)
    assert (params.total, params.active) == (row.total, row.active)
    raw = json.loads((CONFIGS / f"{row.name}.json").read_text())
    independent = hf_tensor_shapes.count(raw)
    assert abs(params.total - independent) <= 0.001 * independent
    if row.card_total is not None:
        total = params.total + (params.mtp if row.plus_mtp else 0)
        assert _as_stated(total, row.card_total, row.card_step), row.card
    if row.card_active is not None:
        active = params.active - (params.embedding if row.active_without_embedding else 0)
        assert _as_stated(active, row.card_active, row.active_step or row.card_step), row.card


TRANSFORMERS = json.loads((CONFIGS / "counts" / "transformers.json").read_text())


@pytest.mark.parametrize("name", sorted(TRANSFORMERS["models"]))
def test_parameter_counts_match_transformers_own_model(name):
    """A third count, by Hugging Face transformers itself (counts/transformers.json: each fixture
    built on the meta device by transformers 5.25.0, ``count_with_transformers.py``): its
    parameters plus the stored routing-bias buffers (DeepSeek-V3's e_score_correction_bias,
    which gpuplan counts as parameters) equal gpuplan's total exactly; MTP modules are built
    by neither."""
    counted = TRANSFORMERS["models"][name]
    assert "error" not in counted, counted
    cfg, _ = _read(name)
    assert count_params(cfg).total == counted["params"] + counted["score_bias_buffers"]


def _as_stated(count: int, figure: float, step: float) -> bool:
    """Whether ``figure`` is ``count`` rounded or cut to the card's last digit ``step``."""
    return figure - step / 2 <= count < figure + step


def test_every_listed_family_has_a_fixture():
    families = {json.loads(p.read_text())["model_type"] for p in CONFIGS.glob("*.json")}
    wanted = {"llama", "qwen2_moe", "qwen3", "qwen3_moe", "qwen3_next", "gemma", "gemma2",
              "gemma3", "gemma3_text", "phi3", "llama4", "gpt_oss", "kimi_k2",
              "deepseek_v32", "glm4_moe", "olmo2", "granitemoehybrid", "nemotron_h", "mamba2"}
    # mistral, mixtral, qwen2, deepseek_v3 (DeepSeek-V3 itself): tests/data/hf, test_hf_config.py
    assert wanted <= families
    assert {r.name for r in ROWS} == {p.stem for p in CONFIGS.glob("*.json")}


def test_no_family_reads_with_a_note_about_an_unknown_type():
    for row in ROWS:
        _, notes = _read(row.name)
        assert not any("not in the traits table" in note for note in notes), row.name


# -- the structure each family reads as --------------------------------------------------------


def test_window_patterns_gemma2_gpt_oss_and_gemma3():
    gemma2 = _read("gemma-2-9b")[0]
    assert gemma2.layer_kinds[:4] == ("sliding", "full", "sliding", "full")
    assert (gemma2.sliding_window, gemma2.norms_per_block) == (4096, 4)
    assert (gemma2.attn_logit_softcap, gemma2.final_logit_softcap) == (50.0, 30.0)
    assert gemma2.embedding_scale == pytest.approx(3584**0.5)
    oss = _read("gpt-oss-20b")[0]
    assert oss.sliding_window == 128 and oss.n_windowed_layers == 12
    assert oss.attention_sinks and oss.attention_bias and oss.expert_weight_dtype == "mxfp4"
    gemma3 = _read("gemma-3-27b")[0]
    assert gemma3.layer_kinds[:6] == ("sliding",) * 5 + ("full",) and gemma3.qk_norm == "head"
    assert count_params(gemma3).total - count_params(gemma3).vision == 27_009_346_304  # text
    tower = gemma3.vision_tower
    assert (tower.merge, tower.encoder.n_patches, tower.pool) == (4, 4096, True)
    from gpuplan.workloads.images import Images
    from gpuplan.workloads.vision import image_tokens

    # mm_tokens_per_image: 256 tokens an image at the processor's 896 x 896
    assert image_tokens(gemma3, Images(count=2, width=896, height=896)) == 512
    assert (gemma3.vocab_size, gemma3.sliding_window) == (262_208, 1024)  # class defaults
    # Qwen2's rule (configuration_qwen2.py): with use_sliding_window, layers from
    # max_window_layers on are windowed; without it (every Qwen release), none is
    raw = json.loads((CONFIGS / "qwen1.5-moe-a2.7b.json").read_text())
    windowed = read_hf_config(raw | {"use_sliding_window": True, "sliding_window": 4096})[0]
    assert windowed.layer_kinds == ("full",) * 21 + ("sliding",) * 3
    assert _read("qwen1.5-moe-a2.7b")[0].sliding_window == 0


def test_linear_state_space_and_sparse_mixers():
    nxt = _read("qwen3-next-80b-a3b")[0]
    assert nxt.layer_kinds[:4] == ("linear", "linear", "linear", "full")
    assert nxt.linear_attention.n_value_heads == 32 and nxt.attn_output_gate
    assert nxt.n_shared_experts == 1 and nxt.shared_expert_gate
    nemotron = _read("nemotron-h-8b-base-8k")[0]
    kinds = list(zip(nemotron.layer_kinds, (nemotron.ffn_kind(i) for i in range(52)), strict=True))
    assert kinds[:8] == [("mamba2", "none"), ("none", "dense")] * 3 + [("mamba2", "none"),
                                                                       ("full", "none")]
    assert nemotron.norms_per_block == 1 and nemotron.activation == "relu2"
    assert nemotron.ssm.n_groups == 8 and nemotron.head_dim == 128
    granite = _read("granite-4.0-h-small")[0]
    assert granite.layer_kinds.count("full") == 4 and granite.layer_kinds.count("mamba2") == 36
    assert (granite.n_shared_experts, granite.position) == (2, "none")
    mamba = _read("mamba-codestral-7b")[0]
    assert set(mamba.layer_kinds) == {"mamba2"} and mamba.ffn_types == ("none",) * 64
    dsa = _read("deepseek-v3.2-exp")[0]
    assert set(dsa.layer_kinds) == {"dsa"} and dsa.sparse_indexer.top_k == 2048


def test_moe_layouts_llama4_deepseek_kimi_and_mtp_apart():
    scout, notes = _read("llama-4-scout-17b-16e")
    assert scout.layer_kinds[:4] == ("chunked", "chunked", "chunked", "nope")
    assert scout.attention_chunk_size == 8192 and scout.n_moe_layers == 48
    assert any("vision tower" in note for note in notes)
    maverick = _read("llama-4-maverick-17b-128e")[0]
    assert [maverick.ffn_kind(i) for i in range(4)] == ["dense", "moe", "dense", "moe"]
    assert (maverick.d_ff, maverick.d_ff_expert) == (16384, 8192)
    kimi = _read("kimi-k2")[0]
    assert (kimi.n_dense_layers, kimi.n_experts, kimi.mtp_layers) == (1, 384, 0)
    glm = _read("glm-4.5")[0]
    assert glm.qkv_bias and not glm.attention_bias and glm.qk_norm == "head"
    params = count_params(glm)
    assert glm.mtp_layers == 1 and params.mtp > 0
    assert params.total == sum(params.per_layer) + params.embedding + params.lm_head + 5120


def test_qk_norms_per_head_and_over_all_heads():
    qwen3 = _read("qwen3-8b")[0]
    without = count_params(dataclasses.replace(qwen3, qk_norm="")).total
    assert count_params(qwen3).total - without == 36 * 2 * 128  # q_norm, k_norm: one head each
    olmo = _read("olmo-2-1124-7b")[0]
    without = count_params(dataclasses.replace(olmo, qk_norm="")).total
    assert olmo.qk_norm == "all" and count_params(olmo).total - without == 32 * (4096 + 4096)


def test_an_unknown_family_reads_with_its_note_on_the_command_line(tmp_path, capsys):
    from gpuplan.cli import main

    raw = json.loads((CONFIGS / "qwen3-8b.json").read_text()) | {"model_type": "qwen9"}
    file = tmp_path / "config.json"
    file.write_text(json.dumps(raw))
    assert main(["models", "--hf-config", str(file), "--json"]) == 0
    out = capsys.readouterr()
    assert "note: model_type 'qwen9' is not in the traits table" in out.err
    # read as a plain decoder: Qwen3's q/k norms are a hidden fact of the known family only
    assert json.loads(out.out)["total_params"] == 8_190_735_360 - 36 * 2 * 128
    del raw["intermediate_size"]
    file.write_text(json.dumps(raw))
    assert main(["models", "--hf-config", str(file)]) == 2
    assert "required field 'intermediate_size' is missing" in capsys.readouterr().err


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.name)
def test_a_missing_hidden_size_is_one_line_naming_it(row):
    raw = json.loads((CONFIGS / f"{row.name}.json").read_text())
    (raw.get("text_config") or raw).pop("hidden_size")
    with pytest.raises(GpuplanError, match="required field 'hidden_size' is missing") as err:
        read_hf_config(raw)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("name", "changes", "message"), [
    ("nemotron-h-8b-base-8k", {"hybrid_override_pattern": "M-X"},
     r"hybrid_override_pattern='M-X' is invalid: give 52 characters of M \(Mamba-2\)"),
    ("llama-4-scout-17b-16e", {"no_rope_layers": [2] * 48},
     "no_rope_layers=.* is invalid: give 48 values of 0 or 1"),
    ("qwen3-next-80b-a3b", {"layer_types": ["full_attention", "banana"]},
     r"layer_types=\['full_attention', 'banana'\] is invalid: give 48 of full_attention"),
    ("qwen1.5-moe-a2.7b", {"shared_expert_intermediate_size": 5000},
     "shared expert's width 5000 is not a multiple of moe width 1408"),
    ("mamba-codestral-7b", {"num_heads": None},
     r"required field 'mamba_num_heads' \(or mamba_n_heads, num_heads\) is missing"),
    ("gemma-3-4b", {"mm_tokens_per_image": 200},
     "mm_tokens_per_image=200 does not pool 4096 patches by a square"),
    ("deepseek-v3.2-exp", {"attention_bias": True},
     "attention_bias=True is not supported for MLA attention"),
])
def test_a_bad_family_field_is_one_line_naming_it(name, changes, message):
    raw = json.loads((CONFIGS / f"{name}.json").read_text())
    part = raw.get("text_config") if "mm_tokens_per_image" not in changes else None
    part = part or raw
    for key, value in changes.items():
        if value is None:
            part.pop(key)
        else:
            part[key] = value
    with pytest.raises(GpuplanError, match=message) as err:
        read_hf_config(raw)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("given", "message"), [
    ({1: "llama"}, "config dict: its keys must be strings"),
    (42, "config=int is invalid: give a config.json path, its folder, or the parsed dict"),
    ({"model_type": "llama", "text_config": 3}, "text_config must be a JSON object, not int"),
])
def test_a_config_of_the_wrong_shape_is_one_line(given, message):
    with pytest.raises(GpuplanError, match=message) as err:
        read_hf_config(given)
    assert "\n" not in str(err.value)


JSON_VALUES = st.none() | st.booleans() | st.integers(-3, 2**40) | st.floats() | st.text(
    max_size=6) | st.lists(st.integers(-1, 3), max_size=4)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(row=st.sampled_from(ROWS), data=st.data())
def test_any_field_of_any_family_gives_a_model_or_a_one_line_error(row, data):
    raw = json.loads((CONFIGS / f"{row.name}.json").read_text())
    part = raw.get("text_config") or raw
    keys = data.draw(st.lists(st.sampled_from(sorted(part)), min_size=1, max_size=3))
    for key in keys:
        part[key] = data.draw(JSON_VALUES)
    try:
        count_params(read_hf_config(raw)[0])
    except GpuplanError as err:
        assert "\n" not in str(err)
