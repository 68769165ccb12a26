"""transformers' eager attention (``hwmodels.attention`` "eager"): the kernels it runs, and the
stacks that build transformers' models taking it for a family with no SDPA path (gpt-oss)."""

import dataclasses
import json
from pathlib import Path

import pytest

from gpuplan.cli import main
from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.hwmodels.attention import (
    attention_time,
    eager_attention_kernels,
    math_attention_time,
)
from gpuplan.hwmodels.bulk import attention_times
from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.sim.estimate.whole_model import model_breakdown
from gpuplan.sim.stacks import get_stack, resolved_attention, with_overrides
from gpuplan.workloads.hf_config import from_hf_config
from gpuplan.workloads.ops import Attention
from gpuplan.workloads.presets import get_model

H100 = get_accelerator("h100-sxm")
EFF = dataclasses.replace(efficiency_for("h100-sxm"), attention_kernel="eager",
                          prefill_attention_kernel="eager")
GPT_OSS = from_hf_config(json.loads(
    (Path(__file__).parent / "data/hf_configs/gpt-oss-20b.json").read_text()), name="gpt-oss-20b")
HF = get_stack("hf-transformers")


def _op(**kw) -> Attention:
    base = dict(name="attention", batch=1, heads_q=64, heads_kv=8, seq_q=2048, seq_kv=2048,
                head_dim=64, v_head_dim=64, causal=True, pass_="fwd", dtype="bf16")
    return Attention(**(base | kw))


def _prefill_s(stack, cfg, seq=8192) -> float:
    return model_breakdown("prefill_step", H100, efficiency_for("h100-sxm"), cfg,
                           {"batch": 1, "seq": seq, "layers": 2}, stack=stack).total_s


def test_gpt_oss_through_hf_transformers_runs_eager_attention_and_costs_more_than_sdpa():
    stack = HF.for_model(GPT_OSS)
    k = resolved_attention(stack, H100)
    assert (k.prefill, k.train, k.decode) == ("eager", "eager", "eager")
    sdpa = dataclasses.replace(HF, eager_without_sdpa=False)
    assert resolved_attention(sdpa.for_model(GPT_OSS), H100).prefill == "cudnn"
    assert _prefill_s(HF, GPT_OSS) > 1.5 * _prefill_s(sdpa, GPT_OSS)


def test_models_without_sinks_keep_the_stack_and_its_price():
    llama = get_model("llama3-8b")
    assert HF.for_model(llama) is HF
    off = dataclasses.replace(HF, eager_without_sdpa=False)
    assert _prefill_s(HF, llama, seq=2048) == _prefill_s(off, llama, seq=2048)


def test_a_forced_kernel_stays_and_other_stacks_keep_sdpa_for_gpt_oss():
    forced = with_overrides(HF, attention_kernel="flash2").for_model(GPT_OSS)
    assert resolved_attention(forced, H100).prefill == "flash2"
    assert get_stack("pytorch").for_model(GPT_OSS) is get_stack("pytorch")


def test_eager_kernels_follow_the_source_sinks_widen_the_rows_and_gqa_repeats():
    labels = [k[0] for k in eager_attention_kernels(_op(sinks=True))]
    assert labels[0] == "repeat k, v" and "cat sink column" in labels and "row max" in labels
    plain = [k[0] for k in eager_attention_kernels(_op(heads_kv=64))]
    assert "repeat k, v" not in plain and "cast weights" in plain  # fp32 softmax, cast back
    with_sinks = attention_time(H100, _op(sinks=True), EFF).total_s
    assert with_sinks > attention_time(H100, _op(), EFF).total_s


@pytest.mark.parametrize("kw", [{}, {"sinks": True}, {"seq_q": 1, "seq_kv": 4096},
                                {"pass_": "bwd", "sinks": True}, {"window": 128, "seq_q": 1}])
def test_eager_is_priced_the_same_one_op_or_in_bulk_and_grows_with_the_keys(kw):
    op = _op(**kw)
    one = attention_time(H100, op, EFF)
    bulk = attention_times(H100, [op], EFF)
    assert bulk.total_s[0] == pytest.approx(one.total_s, rel=1e-12)
    longer = dataclasses.replace(op, seq_kv=op.seq_kv * 2)
    if not op.window:
        assert attention_time(H100, longer, EFF).total_s > one.total_s


def test_eager_gemms_run_in_bf16_faster_than_the_math_backends_fp32_upcast():
    op = _op(heads_kv=64, seq_q=4096, seq_kv=4096, head_dim=128, v_head_dim=128)
    assert attention_time(H100, op, EFF).total_s < math_attention_time(H100, op, EFF).total_s


def test_sliding_window_decode_reads_only_the_window_it_holds():
    full = attention_time(H100, _op(seq_q=1, seq_kv=8192), EFF).total_s
    window = attention_time(H100, _op(seq_q=1, seq_kv=8192, window=128), EFF).total_s
    assert window < full / 4  # the fixed launch costs stay


def test_the_cli_takes_eager_as_an_attention_kernel(capsys):
    code = main(["estimate", "attention", "--seq-q", "1024", "--gpu", "h100-sxm",
                 "--attention-kernel", "eager", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["stack"]["attention"]["prefill"] == "eager"
