"""cuDNN SDPA's graph build at a new decode length (``HostModel.attention_plan_s``)."""

from dataclasses import replace

import pytest

from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.sim.estimate.whole_model import model_breakdown
from gpuplan.sim.stacks import get_stack
from gpuplan.validate.record_prediction import kv_length_grows, predict_breakdown, record_model

H200, A100 = get_accelerator("h200"), get_accelerator("a100-sxm-80gb")
PARAMS = {"batch": 1, "context": 1024, "layers": 4}


def _decode_s(acc, stack, **params):
    return model_breakdown("decode_step", acc, efficiency_for(acc.key), "llama3-8b",
                           PARAMS | params, stack=stack).total_s


def _without_plan(stack):
    return replace(stack, host=replace(stack.host, attention_plan_s=0.0))


def test_a_dynamic_cache_decode_on_cudnn_pays_the_graph_build_once_a_step_at_host_speed():
    hf = get_stack("hf-transformers")
    assert hf.host.attention_plan_s > 0
    slow = replace(hf, host=replace(hf.host, speed_factor=2.0))
    for stack in (hf, slow):
        extra = _decode_s(H200, stack, kv_cache="dynamic") - _decode_s(
            H200, _without_plan(stack), kv_cache="dynamic")
        assert extra == pytest.approx(stack.host.attention_plan_s * stack.host.speed_factor)


def test_a_static_cache_or_a_device_without_cudnn_decode_pays_none():
    hf = get_stack("hf-transformers")
    assert _decode_s(H200, hf, kv_cache="static") == _decode_s(
        H200, _without_plan(hf), kv_cache="static")
    assert _decode_s(A100, hf, kv_cache="dynamic") == _decode_s(  # flash decodes on Ampere
        A100, _without_plan(hf), kv_cache="dynamic")


def test_only_an_uncroppable_sliding_cache_below_its_window_grows_in_the_campaign():
    mistral, llama = record_model("mistral-7b"), record_model("llama3-8b")
    dyn = {"kv_cache": "dynamic", "context": 1024}
    assert kv_length_grows(mistral, dyn)
    assert not kv_length_grows(mistral, dyn | {"context": mistral.sliding_window})
    assert not kv_length_grows(mistral, dyn | {"kv_cache": "static"})
    assert not kv_length_grows(llama, dyn)


def test_a_cropped_campaign_record_is_priced_without_the_build_and_a_growing_one_with_it():
    base = {"layers": 4, "batch": 1, "context": 1024, "kv_cache": "dynamic", "dtype": "bf16",
            "stack": "hf-transformers", "timing": "isolated"}
    plan = get_stack("hf-transformers").host.attention_plan_s
    eff = efficiency_for("h200")
    for model, pays in (("llama3-8b", False), ("mistral-7b", True)):
        got = predict_breakdown("model_decode_step", "h200", base | {"model": model},
                                eff=eff).total_s
        cfg = record_model(model)
        want = model_breakdown("decode_step", H200, eff, cfg, {
            k: base[k] for k in ("layers", "batch", "context", "kv_cache", "dtype")},
            stack=get_stack("hf-transformers") if pays
            else _without_plan(get_stack("hf-transformers"))).total_s
        assert got == pytest.approx(want, rel=1e-12)
        assert (got - model_breakdown("decode_step", H200, eff, cfg, {
            k: base[k] for k in ("layers", "batch", "context", "kv_cache", "dtype")},
            stack=_without_plan(get_stack("hf-transformers"))).total_s) == pytest.approx(
                plan if pays else 0.0, abs=1e-12)


def test_a_negative_graph_build_is_a_clear_error():
    from gpuplan.errors import GpuplanError
    from gpuplan.sim.stacks import HostModel

    with pytest.raises(GpuplanError, match=r"host.attention_plan_s=-0.001 is invalid"):
        HostModel(attention_plan_s=-0.001)
