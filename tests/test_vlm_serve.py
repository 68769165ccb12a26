"""Serving a vision-language model: image tokens join the prompt, the encoder the prefill."""

from __future__ import annotations

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.sim.runtime.serving.engine import simulate
from gpuplan.sim.runtime.serving.on_stack import stack_deployment, stack_scheduler
from gpuplan.sim.runtime.serving.requests import make_workload, read_trace, with_images
from gpuplan.sim.runtime.serving.vision import encoder_s
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


def test_disaggregated_cross_attention_images_are_refused_not_mispriced():
    from gpuplan.sim.runtime.serving.disagg import Disaggregation, simulate_disaggregated

    dep = stack_deployment("llama3.2-11b-vision", "h100-sxm", "vllm")
    load = with_images(_load(), images=1, image_tokens=1601)
    with pytest.raises(GpuplanError, match="disaggregated serving"):
        simulate_disaggregated(dep, SCHED, load, Disaggregation(prefill_replicas=1,
                                                                decode_replicas=1))


def test_vlm_weights_include_the_vision_tower():
    text = stack_deployment("llama3-8b", "h100-sxm", "vllm")
    assert _run(_load()).capacity.weights_bytes > _run(_load(), dep=text).capacity.weights_bytes


def test_negative_image_tokens_are_an_error():
    load = _load(n=2)
    with pytest.raises(GpuplanError, match="image tokens per request=-1"):
        with_images(load, images=1, image_tokens=-1)


# --- cross-attention (Llama 3.2 Vision) ------------------------------------------------------

LLAMA_V = stack_deployment("llama3.2-11b-vision", "h100-sxm", "vllm")
TILE = 1601  # one 560 x 560 tile's image tokens


def _times(res):
    cols = res.request_columns
    ttft = cols["first_token_s"] - cols["arrival_s"]
    return ttft, (cols["finish_s"] - cols["first_token_s"]) / (cols["output_tokens"] - 1)


def test_a_cross_attention_request_pays_encoder_image_kv_and_cross_blocks_exactly():
    from gpuplan.sim.runtime.serving.step_model import StepModel
    from gpuplan.sim.runtime.serving.vision import CrossAttentionStep

    img = _run(with_images(_load(prompt=300), images=1, image_tokens=TILE), dep=LLAMA_V)
    text = _run(_load(prompt=300), dep=LLAMA_V)
    enc = encoder_s(LLAMA_V, EncoderWork.from_image_tokens(LLAMA_V.model.vision_tower, 1, TILE))
    cross = CrossAttentionStep(StepModel(LLAMA_V), TILE)
    (ttft, tpot), (ttft0, tpot0) = _times(img), _times(text)
    assert ttft[0] == pytest.approx(ttft0[0] + enc + cross.cross_s(1, 300), rel=1e-9)
    assert tpot[0] == pytest.approx(tpot0[0] + cross.cross_s(1, 1), rel=1e-9)  # every token
    assert img.summary["vision"]["style"] == "cross-attention"


def test_the_cross_attention_cache_takes_blocks_of_its_own():
    from dataclasses import replace

    from gpuplan.sim.runtime.serving.kv_cache import kv_capacity

    cap = kv_capacity(replace(LLAMA_V, cross_kv_tokens=TILE), SCHED)
    # per layer: 32 self-attention layers x ceil(512 / 16), 8 cross-attention x ceil(1601 / 16)
    assert cap.blocks_of(512) == 32 * 32 + 8 * 101
    assert cap.tokens == pytest.approx(kv_capacity(LLAMA_V, SCHED).tokens, abs=32)


def test_cross_attention_images_cut_the_requests_a_full_cache_holds():
    load = make_workload(rate_per_s=float("inf"), n=400, prompt_tokens=2000, output_tokens=200)
    text = _run(load, dep=LLAMA_V)
    img = _run(with_images(load, images=1, image_tokens=4 * TILE), dep=LLAMA_V)
    assert img.summary["conservation"] == text.summary["conservation"]
    assert img.end_s > text.end_s


def test_decode_runs_cut_short_agree_with_stepping_every_iteration():
    load = with_images(_load(n=20, rate=8.0), images=1, image_tokens=TILE)
    fast = simulate(LLAMA_V, SCHED, load, timeline=False)
    stepped = simulate(LLAMA_V, SCHED, load, timeline=False, max_run_iterations=1)
    assert fast.request_columns["finish_s"] == pytest.approx(stepped.request_columns["finish_s"],
                                                             rel=1e-9)


def test_cross_attention_serving_needs_the_same_images_on_every_request(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens,image_tokens\n0,100,4,1601\n1,100,4,3202\n")
    with pytest.raises(GpuplanError, match="same images on every request"):
        _run(read_trace(trace), dep=LLAMA_V)
