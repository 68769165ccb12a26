"""The structural fields of ``ModelConfig`` that the config reader fills: each bad value is one
line naming the field and the value (``workloads/structure.py``), and each counts as the
modeling code stores it."""

from __future__ import annotations

import dataclasses

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.workloads.params import count_params
from gpuplan.workloads.presets import PRESETS

LLAMA, MIXTRAL = PRESETS["llama3-8b"], PRESETS["mixtral-8x7b"]


@pytest.mark.parametrize(("base", "change", "words"), [
    (LLAMA, {"qk_norm": "rms"}, "qk_norm='rms'"),
    (LLAMA, {"norms_per_block": 3}, "norms_per_block=3"),
    (LLAMA, {"expert_weight_dtype": "mxfp4"}, "expert_weight_dtype='mxfp4' is set but n_experts=0"),
    (LLAMA, {"router_bias": True}, "router_bias=True is set but n_experts=0"),
    (MIXTRAL, {"expert_weight_dtype": "fp4"}, "expert_weight_dtype='fp4'"),
    (LLAMA, {"attn_logit_softcap": -1.0}, "attn_logit_softcap=-1.0"),
    (LLAMA, {"mtp_layers": -1}, "mtp_layers=-1"),
    (LLAMA, {"embedding_scale": 0.0}, "embedding_scale=0.0"),
    (LLAMA, {"ssm_conv_bias": True}, "ssm_conv_bias=True is set but ssm is None"),
    (PRESETS["deepseek-v3"], {"attention_sinks": True}, "attention_sinks=True is set but MLA"),
    (PRESETS["deepseek-v3"], {"qk_norm": "head"},
     "qk_norm='head' is set but MLA attention has its own norms"),
    (LLAMA, {"layer_types": ("full",) * 3}, "layer_types has 3 entries but n_layers=32"),
    (LLAMA, {"ffn_types": ["dense"] * 32}, "ffn_types=['dense', "),
])  # fmt: skip
def test_a_bad_structural_field_is_one_line_naming_it(base, change, words):
    with pytest.raises(GpuplanError) as err:
        dataclasses.replace(base, **change)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_each_structural_part_adds_what_the_modeling_code_stores():
    d, h, kv, hd, layers = 4096, 32, 8, 128, 32
    base = count_params(LLAMA).total

    def added(**change):
        return count_params(dataclasses.replace(LLAMA, **change)).total - base

    assert added(attention_bias=True) == layers * (h * hd + 2 * kv * hd + d)  # q, k, v, o
    assert added(mlp_bias=True) == layers * (2 * 14336 + d)  # gate, up, down
    assert added(qk_norm="head") == layers * 2 * hd
    assert added(norms_per_block=4) == layers * 2 * d  # Gemma's sandwich norms
    assert added(attention_sinks=True) == layers * h
    assert added(attn_output_gate=True) == layers * d * h * hd  # q_proj twice as wide
    assert added(attn_logit_softcap=50.0, embedding_scale=64.0) == 0  # no parameter
