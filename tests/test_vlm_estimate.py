"""A vision-language model's prefill: the encoder plus what its image tokens add, exactly."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.sim.estimate.inference import prefill_breakdown
from gpuplan.sim.estimate.vision import encoder_breakdown
from gpuplan.sim.estimate.whole_model import model_breakdown
from gpuplan.sim.stacks import get_stack, stack_efficiency
from gpuplan.workloads.images import Images
from gpuplan.workloads.presets import get_model
from gpuplan.workloads.vision import EncoderWork

H100 = get_accelerator("h100-sxm")
EFF = efficiency_for("h100-sxm")
STACK = get_stack("vllm")


def _prefill(model, **params):
    return model_breakdown("prefill_step", H100, EFF, model, {"batch": 2, "seq": 300, **params},
                           stack="vllm")


@pytest.mark.parametrize("key", ["qwen2-vl-7b", "llama3.2-11b-vision"])
def test_a_vlm_with_no_images_prefills_as_its_language_model(key):
    cfg = get_model(key)
    text_only = replace(cfg, vision_tower=None)
    assert _prefill(cfg, images=0).total_s == _prefill(text_only).total_s
    assert _prefill(cfg).total_s == _prefill(text_only).total_s


def test_qwen2_vl_image_tokens_add_the_encoder_and_a_longer_prefill_exactly():
    cfg = get_model("qwen2-vl-7b")
    images = Images(count=2, width=448, height=448)  # 2 x 256 image tokens a prompt
    got = _prefill(cfg, images=2, image_size="448x448")
    eff = stack_efficiency(STACK, EFF, H100, phase="prefill")
    lm = prefill_breakdown(H100, eff, cfg, STACK, batch=2, seq=300 + 512)
    enc = encoder_breakdown(H100, eff, cfg, STACK, EncoderWork.of(cfg.vision_tower, images),
                            seqs=2)
    assert got.total_s == pytest.approx(lm.total_s + enc.total_s, rel=1e-12)
    assert got.memory_bytes["kv_cache"] == lm.memory_bytes["kv_cache"]  # the cache holds them


def test_llama_vision_images_add_encoder_cross_attention_and_its_cache_not_prompt_tokens():
    cfg = get_model("llama3.2-11b-vision")
    text = _prefill(cfg)
    got = _prefill(cfg, images=1, image_size="560x560")
    assert got.memory_bytes["kv_cache"] == text.memory_bytes["kv_cache"]  # prompt not longer
    # 2 prompts x 1601 image tokens x 8 cross-attention blocks x (K + V of 8 heads x 128) bf16
    assert got.memory_bytes["cross_kv_cache"] == 2 * 1601 * 8 * 2 * 8 * 128 * 2
    cross = [i for i in got.items if i.op.startswith("cross_attn.")]
    assert {i.op for i in cross} >= {"cross_attn.kv_proj", "cross_attn.attention"}
    assert got.total_s > text.total_s + sum(i.time_s for i in cross)


def test_more_image_pixels_never_prefill_faster():
    cfg = get_model("qwen2-vl-7b")
    times = [_prefill(cfg, images=1, image_size=f"{s}x{s}").total_s for s in (224, 448, 896)]
    assert times == sorted(times) and times[0] < times[-1]


def test_images_for_a_text_only_model_are_an_error_in_the_prefill():
    with pytest.raises(GpuplanError, match="text-only"):
        _prefill("llama3-8b", images=1)


def test_an_image_size_without_images_is_an_error():
    with pytest.raises(GpuplanError, match="needs images"):
        _prefill("qwen2-vl-7b", image_size="448x448")


def test_a_prompt_longer_than_the_context_with_its_image_tokens_is_an_error():
    with pytest.raises(GpuplanError, match="seq \\+ image tokens"):
        _prefill("qwen2-vl-7b", seq=32000, images=4, image_size="1792x1792")
