"""The structural extras of the Hugging Face families priced in the op lists (docs/hf_families.md,
"Priced"): each adds the kernel its modelling code runs, with the bytes of the tensors it
touches, only when set; the ones that run inside another kernel (sinks, attention soft-capping,
biases) or not at all (MTP modules) add nothing; and a whole model prices more with them on every
path (prefill, decode, a training step, a serving iteration)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.sim.estimate.whole_model import model_breakdown
from gpuplan.workloads.hf_config import from_hf_config
from gpuplan.workloads.operators import (
    backward_of,
    embedding_forward,
    head_backward,
    head_forward,
    layer_forward,
    model_forward,
)
from gpuplan.workloads.ops import EAGER_KERNELS, ELEMENTWISE_TENSORS, Elementwise, Gemm
from gpuplan.workloads.presets import _CONFIG_PRESETS, PRESETS

CONFIGS = Path(__file__).parent / "data" / "hf_configs"
LLAMA = PRESETS["llama3-8b"]
NEW_NAMES = {"q_norm", "k_norm", "attn_post_norm", "mlp_post_norm", "attn_output_gate",
             "embedding_scale", "logit_softcap", "shared_expert_gate", "shared_expert_gate_mul"}
E = 2  # bf16 bytes


def _by_name(ops):
    return {op.name: op for op in ops}


def _bytes(ops):
    return sum(op.bytes for op in ops)


def _layer(cfg, batch=2, seq=64, **kw):
    return layer_forward(cfg, batch=batch, seq=seq, dtype="bf16", **kw)


@settings(max_examples=25, deadline=None)
@given(batch=st.integers(1, 8), seq=st.integers(1, 512), mode=st.sampled_from(["head", "all"]),
       tp=st.sampled_from([1, 2, 4]))
def test_qk_norm_adds_an_rmsnorm_over_the_queries_and_the_keys(batch, seq, mode, tp):
    on = dataclasses.replace(LLAMA, qk_norm=mode)
    base, with_norm = _layer(LLAMA, batch, seq, tp=tp), _layer(on, batch, seq, tp=tp)
    added = [op for op in with_norm if op.name not in _by_name(base)]
    assert [op.name for op in added] == ["q_norm", "k_norm"]
    t, d, hq, hkv = batch * seq, LLAMA.qk_head_dim, 32 // tp, 8 // tp
    q, k = added
    assert q.op == k.op == "rmsnorm"
    if mode == "head":  # a row per head and token, over head_dim
        assert (q.tokens, q.hidden, k.tokens, k.hidden) == (t * hq, d, t * hkv, d)
    else:  # a row per token, over every head of the rank
        assert (q.tokens, q.hidden, k.tokens, k.hidden) == (t, hq * d, t, hkv * d)
    # one read and one write of q and of k (a fused norm)
    assert _bytes(with_norm) - _bytes(base) == pytest.approx(2 * E * t * d * (hq + hkv))
    # before RoPE, after the projection (Qwen3Attention.forward)
    names = [op.name for op in with_norm]
    assert names.index("qkv_proj") < names.index("q_norm") < names.index("rope_q")
    # and their backward
    assert {"q_norm.bwd", "k_norm.bwd"} <= {op.name for op in backward_of(with_norm)}


def test_sandwich_norms_add_a_post_norm_before_each_residual_add():
    gemma = dataclasses.replace(LLAMA, norms_per_block=4)
    base, ops = _layer(LLAMA), _layer(gemma)
    names = [op.name for op in ops]
    assert set(names) - set(_by_name(base)) == {"attn_post_norm", "mlp_post_norm"}
    assert names.index("o_proj") < names.index("attn_post_norm") < names.index("attn_residual")
    assert names.index("down_proj") < names.index("mlp_post_norm") < names.index("mlp_residual")
    assert _bytes(ops) - _bytes(base) == pytest.approx(2 * 2 * E * 128 * LLAMA.d_model)


def test_the_attention_output_gate_doubles_the_query_projection_and_multiplies_the_output():
    gated = dataclasses.replace(LLAMA, attn_output_gate=True)
    base, ops = _by_name(_layer(LLAMA)), _by_name(_layer(gated))
    q_width = 32 * LLAMA.qk_head_dim
    assert ops["qkv_proj"].n - base["qkv_proj"].n == q_width  # the q half doubles
    gate = ops["attn_output_gate"]
    assert (gate.op, gate.tokens, gate.hidden) == ("sigmoid_mul", 128, 32 * LLAMA.v_dim_per_head)
    assert gate.bytes == 3 * E * 128 * q_width  # output and gate read, the product written
    names = list(ops)
    assert names.index("attn_out_layout") < names.index("attn_output_gate") < names.index("o_proj")


def test_squared_relu_is_a_two_matrix_mlp_with_its_own_activation():
    relu2 = dataclasses.replace(LLAMA, activation="relu2")
    gelu = dataclasses.replace(LLAMA, activation="gelu")
    ops, ref = _by_name(_layer(relu2)), _by_name(_layer(gelu))
    assert "relu2" in ops and "gelu" not in ops and "gate_up_proj" not in ops
    assert ops["fc1"].n == ref["fc1"].n == LLAMA.d_ff
    assert ops["relu2"].bytes == ref["gelu"].bytes  # one read, one write when fused
    eager = dataclasses.replace(ops["relu2"], impl="eager")
    assert eager.kernels == 2  # relu, then torch.square


@pytest.mark.parametrize("change", [
    {"attention_sinks": True}, {"attn_logit_softcap": 50.0}, {"attention_bias": True},
    {"mlp_bias": True}, {"qkv_bias": True},
])  # fmt: skip
def test_what_runs_inside_a_kernel_adds_no_kernel(change):
    """The ops are the same kernels; the attention op only carries the sink flag, which a
    fused kernel takes inside (a stack running transformers' eager attention prices it:
    tests/test_eager_attention.py)."""
    cfg = dataclasses.replace(LLAMA, **change)
    plain = [dataclasses.replace(op, sinks=False) if hasattr(op, "sinks") else op
             for op in _layer(cfg)]
    assert plain == _layer(LLAMA)
    assert head_forward(cfg, tokens=8, dtype="bf16") == head_forward(LLAMA, tokens=8, dtype="bf16")


def test_mtp_modules_do_not_run_in_a_plain_forward():
    cfg = dataclasses.replace(PRESETS["deepseek-v3"], n_layers=4)
    assert model_forward(cfg, batch=1, seq=8) == model_forward(
        dataclasses.replace(cfg, mtp_layers=0), batch=1, seq=8)


def test_the_final_soft_cap_runs_over_the_logits_forward_and_backward():
    cfg = dataclasses.replace(LLAMA, final_logit_softcap=30.0)
    ops = _by_name(head_forward(cfg, tokens=16, dtype="bf16"))
    cap = ops["logit_softcap"]
    assert (cap.op, cap.tokens, cap.hidden) == ("softcap", 16, LLAMA.vocab_size)
    assert list(ops).index("lm_head") < list(ops).index("logit_softcap")
    assert "logit_softcap.bwd" in _by_name(head_backward(cfg, tokens=16, dtype="bf16"))
    assert "logit_softcap" not in _by_name(head_forward(LLAMA, tokens=16, dtype="bf16"))


def test_the_embedding_scale_is_one_multiply_over_the_embeddings():
    cfg = dataclasses.replace(LLAMA, embedding_scale=64.0)
    scale = _by_name(embedding_forward(cfg, tokens=10, dtype="bf16"))["embedding_scale"]
    assert scale.bytes == 2 * E * 10 * LLAMA.d_model
    assert "embedding_scale" not in _by_name(embedding_forward(LLAMA, tokens=10, dtype="bf16"))


def test_the_shared_expert_gate_scales_the_shared_output():
    qwen_moe = from_hf_config(CONFIGS / "qwen1.5-moe-a2.7b.json")
    assert qwen_moe.shared_expert_gate
    ops = _by_name(_layer(qwen_moe))
    gemm, mul = ops["shared_expert_gate"], ops["shared_expert_gate_mul"]
    assert isinstance(gemm, Gemm) and (gemm.n, gemm.k) == (1, qwen_moe.d_model)
    assert isinstance(mul, Elementwise) and mul.hidden == qwen_moe.d_model
    plain = _by_name(_layer(dataclasses.replace(qwen_moe, shared_expert_gate=False)))
    assert "shared_expert_gate" not in plain


def test_every_new_elementwise_op_has_a_fused_and_an_eager_form():
    assert set(ELEMENTWISE_TENSORS) == set(EAGER_KERNELS)


@pytest.mark.parametrize("name", sorted(set(PRESETS) - set(_CONFIG_PRESETS)))
def test_presets_list_none_of_the_new_kernels(name):
    """The presets written in Python (those read from a config.json may use any kernel)."""
    cfg = PRESETS[name]
    if cfg.vocab_size == 0:  # a vision encoder alone
        return
    names = {op.name for layer in range(min(cfg.n_layers, 4))
             for op in _layer(cfg, batch=1, seq=4, layer=layer)}
    names |= {op.name for op in embedding_forward(cfg, tokens=4, dtype="bf16")}
    names |= {op.name for op in head_forward(cfg, tokens=4, dtype="bf16")}
    assert not names & NEW_NAMES


H100 = get_accelerator("h100-sxm")
EFF = efficiency_for("h100-sxm")
CASES = [
    ("prefill_step", "hf-transformers", {"batch": 1, "seq": 512}),
    ("decode_step", "hf-transformers", {"batch": 4, "context": 512}),
    ("prefill_step", "vllm", {"batch": 1, "seq": 512}),
    ("decode_step", "vllm", {"batch": 4, "context": 512}),  # a serving iteration
    ("train_step", "hf-transformers", {"micro_batch": 1, "seq": 512}),
    ("train_step", "fsdp2", {"micro_batch": 1, "seq": 512}),
]


@pytest.mark.parametrize(("kind", "stack", "params"), CASES)
def test_qwen3_8b_prices_more_with_its_qk_norms_on_every_path(kind, stack, params):
    qwen3 = dataclasses.replace(from_hf_config(CONFIGS / "qwen3-8b.json"), n_layers=4)
    assert qwen3.qk_norm == "head"
    without = dataclasses.replace(qwen3, qk_norm="")
    bd = model_breakdown(kind, H100, EFF, qwen3, params, stack=stack)
    ref = model_breakdown(kind, H100, EFF, without, params, stack=stack)
    # its own kernels, or inside a compiled stack's fused run of elementwise ops
    norms_s = sum(i.time_s for i in bd.items if "q_norm" in i.op or "k_norm" in i.op)
    assert norms_s > 0 and bd.total_s > ref.total_s
    assert not any("q_norm" in i.op or "k_norm" in i.op for i in ref.items)


def test_gemma2_prices_its_post_norms_and_soft_cap_in_a_prefill():
    gemma = dataclasses.replace(from_hf_config(CONFIGS / "gemma-2-9b.json"), n_layers=2)
    assert gemma.norms_per_block == 4 and gemma.final_logit_softcap
    plain = dataclasses.replace(gemma, norms_per_block=2, final_logit_softcap=0.0)
    params = {"batch": 1, "seq": 256}
    bd = model_breakdown("prefill_step", H100, EFF, gemma, params, stack="hf-transformers")
    ref = model_breakdown("prefill_step", H100, EFF, plain, params, stack="hf-transformers")
    assert bd.total_s > ref.total_s
    ops = {item.op for item in bd.items}
    assert any("post_norm" in op for op in ops) and any("logit_softcap" in op for op in ops)


@pytest.mark.parametrize(("change", "split_elems", "replicated_bytes"), [
    ({"qk_norm": "head"}, (32 + 8) * 128, 0),  # the normed q and k
    ({"attn_output_gate": True}, 2 * 32 * 128, 0),  # the gate and the gated output
    ({"norms_per_block": 4}, 0, 2 * 4096 * E + 8),  # two post-norm inputs, two statistics
])  # fmt: skip
def test_the_extras_keep_their_tensors_for_the_backward(change, split_elems, replicated_bytes):
    from gpuplan.workloads.memory import layer_activation_bytes

    base = layer_activation_bytes(LLAMA, tokens=1)
    acts = layer_activation_bytes(dataclasses.replace(LLAMA, **change), tokens=1)
    assert acts.split_bytes - base.split_bytes == split_elems * E
    assert acts.replicated_bytes - base.replicated_bytes == replicated_bytes
