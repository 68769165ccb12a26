"""Vision-language models: the tower's shape, image tokens, parameters and errors."""

from __future__ import annotations

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.workloads.images import Images, parse_image_size
from gpuplan.workloads.params import count_params
from gpuplan.workloads.presets import get_model
from gpuplan.workloads.vision import image_tokens


# Published totals: the safetensors parameter counts of the Hugging Face checkpoints
# (Qwen/Qwen2-VL-7B-Instruct: 8,291,375,616, "8.29B"; meta-llama/Llama-3.2-11B-Vision:
# 10,670,220,835, "10.6B" on Meta's model card). Tolerance 1%.
@pytest.mark.parametrize("key, published", [("qwen2-vl-7b", 8_291_375_616),
                                            ("llama3.2-11b-vision", 10_670_220_835)])
def test_vlm_parameter_counts_match_the_published_totals(key, published):
    total = count_params(get_model(key)).total
    assert abs(total / published - 1) < 0.01


def test_the_vision_tower_is_counted_apart_from_the_language_model():
    c = count_params(get_model("llama3.2-11b-vision"))
    # the 32 self-attention blocks, embedding (without the 8 extra rows) and head are Llama 3 8B's
    text = count_params(get_model("llama3-8b")).total
    assert c.total - c.vision == text
    assert c.final_norms == 4096


def test_qwen2_vl_image_tokens_are_the_merged_patches():
    cfg = get_model("qwen2-vl-7b")
    # (448 / 14)^2 = 1024 patches, 2 x 2 merged: 256 tokens per image
    assert image_tokens(cfg, Images(count=1, width=448, height=448)) == 256
    assert image_tokens(cfg, Images(count=3, width=1176, height=812)) == 3 * (84 * 58) // 4


def test_llama_vision_image_tokens_are_1601_per_tile_up_to_four_tiles():
    cfg = get_model("llama3.2-11b-vision")
    assert image_tokens(cfg, Images(count=1, width=560, height=560)) == 1601
    assert image_tokens(cfg, Images(count=1, width=1120, height=1120)) == 4 * 1601
    assert image_tokens(cfg, Images(count=1, width=4000, height=3000)) == 4 * 1601


def test_no_images_are_no_image_tokens():
    assert image_tokens(get_model("qwen2-vl-7b"), Images(count=0, width=448, height=448)) == 0
    assert image_tokens(get_model("qwen2-vl-7b"), None) == 0


def test_images_for_a_text_only_model_are_an_error():
    with pytest.raises(GpuplanError, match="text-only model"):
        image_tokens(get_model("llama3-8b"), Images(count=1, width=448, height=448))


def test_an_image_side_not_a_multiple_of_the_patch_is_an_error():
    with pytest.raises(GpuplanError, match="width=450 is not a multiple of 28"):
        image_tokens(get_model("qwen2-vl-7b"), Images(count=1, width=450, height=448))


@pytest.mark.parametrize("text", ["0x448", "448", "-5x4", "axb", "448x"])
def test_a_non_positive_or_malformed_image_size_is_an_error(text):
    with pytest.raises(GpuplanError, match="image size"):
        parse_image_size(text)


def test_a_non_positive_image_side_is_an_error():
    with pytest.raises(GpuplanError, match="image width=0"):
        Images(count=1, width=0, height=448)


QWEN2_VL_CONFIG = {  # Qwen/Qwen2-VL-7B-Instruct config.json (the fields read)
    "model_type": "qwen2_vl", "hidden_size": 3584, "intermediate_size": 18944,
    "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
    "max_position_embeddings": 32768, "vocab_size": 152064, "tie_word_embeddings": False,
    "vision_config": {"depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16,
                      "in_chans": 3, "hidden_size": 3584, "patch_size": 14,
                      "spatial_merge_size": 2, "temporal_patch_size": 2},
}  # fmt: skip
MLLAMA_CONFIG = {  # meta-llama/Llama-3.2-11B-Vision config.json (the fields read)
    "model_type": "mllama",
    "text_config": {"vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336,
                    "num_hidden_layers": 40, "num_attention_heads": 32, "num_key_value_heads": 8,
                    "cross_attention_layers": [3, 8, 13, 18, 23, 28, 33, 38],
                    "max_position_embeddings": 131072, "tie_word_embeddings": False},
    "vision_config": {"hidden_size": 1280, "num_hidden_layers": 32, "num_global_layers": 8,
                      "attention_heads": 16, "intermediate_size": 5120, "image_size": 560,
                      "patch_size": 14, "num_channels": 3, "max_num_tiles": 4,
                      "intermediate_layers_indices": [3, 7, 15, 23, 30],
                      "supported_aspect_ratios": [[1, 1], [1, 2], [1, 3], [1, 4], [2, 1],
                                                  [2, 2], [3, 1], [4, 1]]},
}  # fmt: skip


@pytest.mark.parametrize("raw, key", [(QWEN2_VL_CONFIG, "qwen2-vl-7b"),
                                      (MLLAMA_CONFIG, "llama3.2-11b-vision")])
def test_the_hf_reader_reads_vision_config_as_the_preset(raw, key):
    from gpuplan.workloads.hf_config import from_hf_config

    cfg = from_hf_config(raw)
    assert count_params(cfg) == count_params(get_model(key))
    assert cfg.vision_tower.style == get_model(key).vision_tower.style


def test_the_hf_reader_keeps_mllama_self_attention_blocks_as_layers():
    from gpuplan.workloads.hf_config import from_hf_config

    cfg = from_hf_config(MLLAMA_CONFIG)
    assert cfg.n_layers == 32 and len(cfg.vision_tower.cross_attention_layers) == 8


def test_the_hf_reader_refuses_a_cross_attention_layer_outside_the_stack():
    from gpuplan.workloads.hf_config import from_hf_config

    raw = {**MLLAMA_CONFIG, "text_config": {**MLLAMA_CONFIG["text_config"],
                                             "cross_attention_layers": [3, 40]}}
    with pytest.raises(GpuplanError, match="cross_attention_layers"):
        from_hf_config(raw)


def test_the_hf_reader_refuses_a_merger_width_unlike_the_language_model():
    from gpuplan.workloads.hf_config import from_hf_config

    raw = {**QWEN2_VL_CONFIG, "vision_config": {**QWEN2_VL_CONFIG["vision_config"],
                                                 "hidden_size": 4096}}
    with pytest.raises(GpuplanError, match="must equal the language model's hidden_size"):
        from_hf_config(raw)


def test_the_catalogue_shows_a_vlm_tower(capsys):
    import json

    from gpuplan.cli import main

    assert main(["models", "qwen2-vl-7b", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["vision_style"] == "inline"
    assert shown["image_tokens_per_image"] == "256 at 448x448"
    assert shown["vision_params"] == count_params(get_model("qwen2-vl-7b")).vision


def test_a_tower_whose_style_and_cross_attention_layers_disagree_is_an_error():
    from dataclasses import replace

    tower = get_model("qwen2-vl-7b").vision_tower
    with pytest.raises(GpuplanError, match="style='inline' and cross_attention_layers=.* disagree"):
        replace(tower, cross_attention_layers=(3,))


def test_train_image_flags_without_images_are_a_one_line_error(capsys):
    from gpuplan.cli import main

    for flag in (["--image-size", "448x448"], ["--freeze-vision"]):
        assert main(["train", "--model", "qwen2-vl-7b", "--gpus", "1", *flag]) != 0
        err = capsys.readouterr().err
        assert "--image-size and --freeze-vision need --images N" in err
        assert len(err.strip().splitlines()) == 1


def test_an_image_size_without_images_is_an_error():
    from gpuplan.sim.estimate.whole_model import images_of

    with pytest.raises(GpuplanError, match="image_size='448x448' needs images=N"):
        images_of(get_model("qwen2-vl-7b"), {"image_size": "448x448"})
