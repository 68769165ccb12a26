"""Serving a vision-language model: image tokens join the prompt, the encoder the prefill."""

from __future__ import annotations

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.sim.serving.engine import simulate
from gpuplan.sim.serving.on_stack import stack_deployment, stack_scheduler
from gpuplan.sim.serving.requests import make_workload, read_trace, with_images
from gpuplan.sim.serving.vision import encoder_s
from gpuplan.workloads.vision import EncoderWork

DEP = stack_deployment("qwen2-vl-7b", "h100-sxm", "vllm")
SCHED = stack_scheduler("vllm")


def _load(n=1, prompt=300, rate=1.0):
    return make_workload(rate_per_s=rate, n=n, prompt_tokens=prompt, output_tokens=8, seed=0)


def _run(load, dep=DEP):
    return simulate(dep, SCHED, load, timeline=False)


def test_requests_with_no_images_serve_as_without_them():
    load = _load(n=30, rate=5.0)
    plain, zero = _run(load), _run(with_images(load, images=0, image_tokens=0))
    assert plain.requests.equals(zero.requests)  # NaN equal to NaN
    assert "vision" not in zero.summary


def test_a_lone_request_pays_its_encoder_and_its_longer_prompt_exactly():
    img = _run(with_images(_load(prompt=300), images=1, image_tokens=256))
    longer = _run(_load(prompt=300 + 256))
    enc = encoder_s(DEP, EncoderWork.from_image_tokens(DEP.model.vision_tower, 1, 256))
    ttft = img.request_columns["first_token_s"] - img.request_columns["arrival_s"]
    ttft_longer = longer.request_columns["first_token_s"] - longer.request_columns["arrival_s"]
    assert enc > 0
    assert ttft[0] == pytest.approx(ttft_longer[0] + enc, rel=1e-12)
    assert img.summary["vision"]["image_tokens_total"] == 256
    assert img.summary["vision"]["encoder_s_total"] == pytest.approx(enc)


def test_a_trace_carries_image_tokens(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens,image_tokens\n0,100,4,256\n1,100,4,0\n")
    load = read_trace(trace)
    assert list(load.image_tokens) == [256, 0]
    assert list(load.images_per_request) == [1, 0]
    res = _run(load)
    assert res.summary["vision"]["requests_with_images"] == 1


def test_images_on_a_text_only_deployment_are_an_error():
    dep = stack_deployment("llama3-8b", "h100-sxm", "vllm")
    with pytest.raises(GpuplanError, match="text-only"):
        _run(with_images(_load(), images=1, image_tokens=256), dep=dep)


def test_cross_attention_images_in_serve_are_refused_not_mispriced():
    dep = stack_deployment("llama3.2-11b-vision", "h100-sxm", "vllm")
    with pytest.raises(GpuplanError, match="cross-attention"):
        _run(with_images(_load(), images=1, image_tokens=1601), dep=dep)


def test_vlm_weights_include_the_vision_tower():
    text = stack_deployment("llama3-8b", "h100-sxm", "vllm")
    assert _run(_load()).capacity.weights_bytes > _run(_load(), dep=text).capacity.weights_bytes


def test_negative_image_tokens_are_an_error():
    load = _load(n=2)
    with pytest.raises(GpuplanError, match="image tokens per request=-1"):
        with_images(load, images=1, image_tokens=-1)
