"""MLA as serving engines run it: decode absorbed against the cached latent (576 elements a token
a block, whole on every tensor-parallel rank), prefill expanded (``sim.runtime.serving.mla_forms``)."""

import pytest

from gpuplan.sim.runtime.serving.deployment import deployment
from gpuplan.sim.runtime.serving.iteration import (
    Batch,
    decode_ops,
    iteration_breakdown,
    mixer_templates,
    prefill_ops,
    token_ops,
)
from gpuplan.sim.runtime.serving.step_model import StepModel
from gpuplan.workloads.ops import Attention, Memory
from gpuplan.workloads.presets import get_model

V3 = get_model("deepseek-v3")
LATENT = V3.kv_lora_rank + V3.qk_rope_head_dim  # 512 + 64


def _dep(tp: int, stack: str = "vllm", kv_dtype: str = "bf16"):
    return deployment("deepseek-v3", "h200", tp=tp, stack=stack, kv_dtype=kv_dtype,
                      weight_dtype="fp8")


def _decode_attention(dep, seqs: int, kv_tokens: float) -> Attention:
    att = mixer_templates(dep, layer=0)[0]
    ops = decode_ops(dep, att, seqs=seqs, kv_tokens=kv_tokens)
    return next(op for op in ops if isinstance(op, Attention))


@pytest.mark.parametrize("tp", [1, 2, 8])
@pytest.mark.parametrize("kv_dtype,elem_bytes", [("bf16", 2), ("fp8", 1)])
def test_decode_reads_the_576_element_latent_per_token_on_every_rank(tp, kv_dtype, elem_bytes):
    dep = _dep(tp, kv_dtype=kv_dtype)
    seqs, per_seq = 4, 3000
    one = _decode_attention(dep, seqs, seqs * per_seq)
    two = _decode_attention(dep, seqs, seqs * 2 * per_seq)
    per_cached_token = (two.bytes - one.bytes) / (seqs * per_seq)
    assert per_cached_token == LATENT * elem_bytes  # not divided by tp: one latent head
    assert one.heads_kv == 1 and one.shared_kv
    # over the model's layers: 576 x dtype x 61 bytes a cached token
    assert per_cached_token * V3.n_layers == LATENT * elem_bytes * 61


@pytest.mark.parametrize("tp", [1, 8])
def test_decode_flops_per_cached_token_are_qk_over_576_and_pv_over_512(tp):
    dep = _dep(tp)
    heads = V3.n_heads // tp
    one = _decode_attention(dep, 1, 1000)
    two = _decode_attention(dep, 1, 2000)
    assert (two.flops - one.flops) / 1000 == 2 * heads * (LATENT + V3.kv_lora_rank)


def test_decode_tokens_run_the_absorbed_bmms_and_no_latent_expansion():
    dep = _dep(8)
    names = {op.name for op in token_ops(dep, tokens=16, layer=5)}
    assert "kv_b_proj" not in names
    att = mixer_templates(dep, layer=5)[0]
    dec = [op.name for op in decode_ops(dep, att, seqs=16, kv_tokens=16 * 100)]
    assert dec == ["mla_w_uk", "decode_attention", "mla_w_uv"]


def test_a_prefill_piece_expands_its_new_and_cached_tokens():
    dep = _dep(8)
    att = mixer_templates(dep, layer=5)[0]
    ops = prefill_ops(dep, att, tokens=300, cached=700, seqs=2)
    expand = next(op for op in ops if op.name == "kv_b_proj")
    assert expand.m == 2 * (300 + 700) and expand.k == V3.kv_lora_rank
    pre = next(op for op in ops if isinstance(op, Attention))
    assert pre.heads_kv == V3.n_kv_heads // 8 and not pre.shared_kv  # expanded heads


def test_the_kv_append_writes_the_whole_latent_on_every_rank():
    for tp in (1, 8):
        ops = token_ops(_dep(tp), tokens=10, layer=0)
        append = next(op for op in ops if isinstance(op, Memory) and op.name == "kv_cache_append")
        assert append.bytes_moved == 2 * 10 * LATENT * 2  # read and written once, bf16


def test_hf_transformers_keeps_the_expanded_cache_and_decode():
    dep = _dep(8, stack="hf-transformers")
    att = mixer_templates(dep, layer=0)[0]
    ops = decode_ops(dep, att, seqs=2, kv_tokens=200)
    assert [op.name for op in ops if op.name.startswith("mla_")] == []
    dec = next(op for op in ops if isinstance(op, Attention))
    assert dec.heads_kv == V3.n_kv_heads // 8 and not dec.shared_kv
    assert "kv_b_proj" in {op.name for op in token_ops(dep, tokens=2, layer=0)}


def test_absorbed_decode_on_all_heads_is_compute_bound_and_on_a_tp8_share_memory_bound():
    # 2 x 128 x 1088 FLOPs per 1152 bytes (bf16) is past the H200's ridge; a TP-8 rank's 16 heads
    # are not (FlashMLA README: memory- and compute-bound configurations)
    for tp, bound in ((1, "compute"), (8, "memory")):
        bd = iteration_breakdown(_dep(tp), Batch(decode_seqs=64, decode_kv_tokens=64 * 4000))
        item = next(i for i in bd.items if i.op == "decode_attention")
        assert item.bound == bound, (tp, item.bound)


@pytest.mark.parametrize("tp", [1, 8])
def test_the_fast_step_model_equals_the_reference_for_mla(tp):
    dep = _dep(tp)
    model = StepModel(dep)
    for batch in (Batch(decode_seqs=7, decode_kv_tokens=7 * 900),
                  Batch(prefill=((256, 512, 1),), decode_seqs=3, decode_kv_tokens=3 * 3000)):
        ref = iteration_breakdown(dep, batch).total_s
        assert model.iteration_s(batch) == pytest.approx(ref, rel=1e-9)


def test_below_its_ridge_a_compute_bound_decode_is_within_one_percent():
    # the StepModel's documented exception: TP 1 crosses the ridge at a few hundred tokens
    dep = _dep(1)
    model = StepModel(dep)
    for per_seq in (1, 50, 300):
        batch = Batch(decode_seqs=16, decode_kv_tokens=16 * per_seq)
        ref = iteration_breakdown(dep, batch).total_s
        assert model.iteration_s(batch) == pytest.approx(ref, rel=0.01)
