"""Vision-language models: the tower's shape, image tokens, parameters and errors."""

from __future__ import annotations

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.workloads.params import count_params
from gpuplan.workloads.presets import get_model
from gpuplan.workloads.vision import Images, image_tokens, parse_image_size


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
