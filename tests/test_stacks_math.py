"""SDPA's math backend (hwmodels/attention.py ``math_attention_time``): its GEMMs and its
softmax are separate kernels, so the softmax's pass over the scores adds to the GEMMs' time."""

import pytest

from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.hwmodels.attention import math_attention_time
from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.workloads.ops import Attention

H200 = get_accelerator("h200")
EFF = efficiency_for("h200")


def _op(**kw):
    base = dict(name="attn", batch=2, heads_q=16, heads_kv=16, seq_q=8192, seq_kv=8192,
                head_dim=64, v_head_dim=64, causal=True, pass_="fwd", dtype="bf16")
    return Attention(**(base | kw))


def test_the_softmax_pass_adds_to_the_gemms():
    t = math_attention_time(H200, _op(), EFF)
    op = _op()
    rows = op.batch * op.heads_q * op.seq_q
    flops = 2 * rows * op.seq_kv * (op.head_dim + op.v_head_dim)
    gemm_floor_s = flops / (H200.peak("fp32") * EFF.gemm_fraction("fp32"))
    softmax_s = rows * op.seq_kv * 4 * 2 / (H200.hbm_bytes_per_s * EFF.hbm_fraction)
    assert t.total_s >= 0.99 * (gemm_floor_s + softmax_s)


def test_twice_the_keys_is_about_twice_the_time():
    short = math_attention_time(H200, _op(seq_kv=4096), EFF).total_s
    long = math_attention_time(H200, _op(), EFF).total_s
    assert long / short == pytest.approx(2.0, rel=0.1)
