"""MTP speculative decoding (``serve --speculative mtp``): acceptance per position, the model's
own MTP module priced and held in memory, and a model without one refused."""

import itertools
import json
from dataclasses import replace

import pytest

from gpuplan.cli import main
from gpuplan.errors import GpuplanError
from gpuplan.sim.runtime.serving.mtp import (
    FIRST_POSITION_ACCEPT,
    THREE_DRAFT_ACCEPT_LENGTH,
    default_acceptance,
    mtp_kv_bytes_per_token,
    mtp_weights_bytes,
)
from gpuplan.sim.runtime.serving.on_stack import stack_deployment
from gpuplan.sim.runtime.serving.speculative import (
    Speculation,
    Speculator,
    serving_speculation,
    speculative_decode,
)
from gpuplan.sim.runtime.serving.step_model import StepModel
from gpuplan.workloads.presets import get_model

SERVE = ["serve", "--model", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--weight-dtype", "fp8",
         "--kv-dtype", "fp8", "--max-model-len", "8192", "--stack", "sglang", "--rate", "1",
         "--prompt-tokens", "1000", "--output-tokens", "100", "--requests", "8", "--json",
         "--no-timing"]  # fmt: skip


@pytest.fixture(scope="module")
def dep():
    return stack_deployment("deepseek-v3", "h200", "sglang", tp=8, weight_dtype="fp8",
                            kv_dtype="fp8")  # fmt: skip


@pytest.fixture(scope="module")
def step(dep):
    return StepModel(dep)


def _expected_by_enumeration(rates):
    """E[tokens] over every accept/reject pattern of the drafts: the accepted prefix (up to the
    first rejection) plus the target's own token, each pattern with its probability."""
    total = 0.0
    for pattern in itertools.product((True, False), repeat=len(rates)):
        p = 1.0
        for ok, a in zip(pattern, rates, strict=True):
            p *= a if ok else 1 - a
        prefix = next((i for i, ok in enumerate(pattern) if not ok), len(rates))
        total += p * (prefix + 1)
    return total


@pytest.mark.parametrize("rates", [(0.9, 0.75, 0.6), (0.875, 0.5), (1.0, 0.0, 1.0), (0.3,)])
def test_tokens_per_step_is_the_product_sum_of_per_position_acceptance(rates):
    spec = Speculation(method="mtp", k=len(rates), acceptance=rates)
    assert spec.tokens_per_step == pytest.approx(_expected_by_enumeration(rates))
    # one rate for every position is the scalar form (Leviathan et al. eq. 1)
    same = Speculation(method="ngram", k=3, acceptance=(0.7, 0.7, 0.7))
    assert same.tokens_per_step == pytest.approx(
        Speculation(method="ngram", k=3, acceptance=0.7).tokens_per_step)


def test_the_default_acceptance_reproduces_the_published_figures():
    cfg = get_model("deepseek-v3")
    one, three = default_acceptance(cfg, 1), default_acceptance(cfg, 3)
    assert one == (FIRST_POSITION_ACCEPT,) and 0.85 <= one[0] <= 0.90  # DeepSeek-V3 sec. 5.4.3
    spec = Speculation(method="mtp", k=3, acceptance=three)
    assert spec.tokens_per_step == pytest.approx(THREE_DRAFT_ACCEPT_LENGTH)  # SGLang's 2.65
    reach = list(itertools.accumulate(three, lambda x, y: x * y))  # each position's own rate
    assert reach == sorted(reach, reverse=True) and len(set(reach)) == 3
    with pytest.raises(GpuplanError, match="--accept-rate"):
        default_acceptance(cfg, 4)  # nothing published beyond three draft tokens
    llama_mtp = replace(get_model("llama3-8b"), mtp_layers=1)  # an MTP module, not DeepSeek's
    with pytest.raises(GpuplanError, match="llama3-8b: no published acceptance"):
        default_acceptance(llama_mtp, 1)


def test_the_verification_is_k_plus_1_tokens_through_the_main_model(step):
    spec = Speculation(method="mtp", k=3, acceptance=(0.9, 0.7, 0.5))
    got = speculative_decode(step, spec, seqs=8, context=1000)
    assert got["verify_s"] == step.mixed_s(((4, 1000, 8),), 0, 0, 32, replay=True)
    assert got["tpot_s"] == pytest.approx(got["step_s"] / spec.tokens_per_step)


def test_the_draft_is_the_mtp_module_run_k_times(step):
    n = step.dep.model.n_layers
    draft = [speculative_decode(step, Speculation(method="mtp", k=k, acceptance=0.8), seqs=8,
                                context=1000)["draft_s"] for k in (1, 2, 3)]  # fmt: skip
    verify = speculative_decode(step, Speculation(method="mtp", k=1, acceptance=0.8), seqs=8,
                                context=1000)["verify_s"]  # fmt: skip
    # more than one block's share of the main model's pass, far less than the pass itself
    assert step.token_s(16) / n < draft[0] < verify / 5
    # each further draft token is one more pass of the module over one token a sequence
    assert draft[0] < draft[1] < draft[2]
    assert draft[2] - draft[1] == pytest.approx(draft[1] - draft[0], rel=0.5)


def test_the_mtp_weights_and_cache_are_held(dep):
    from gpuplan.workloads.params import count_params

    cfg = dep.model
    tables = 2 * cfg.vocab_size * cfg.d_model  # shared with the main model, not loaded again
    bf16 = stack_deployment("deepseek-v3", "h200", "sglang", tp=1, weight_dtype="bf16")
    assert mtp_weights_bytes(bf16, 1) == pytest.approx(2 * (count_params(cfg).mtp - tables))
    spec = Speculation(method="mtp", k=2, acceptance=0.8)
    sp = Speculator(spec, dep)
    assert sp.extra_weights_bytes(8) == mtp_weights_bytes(dep, 8) > 1e9  # ~11.7e9 fp8 params / 8
    assert sp.kv_bytes_per_token(8) == mtp_kv_bytes_per_token(dep, 8) > 0
    plain = json.loads(_run(SERVE))["kv_cache"]
    mtp = json.loads(_run([*SERVE, "--speculative", "mtp", "--spec-tokens", "2"]))["kv_cache"]
    assert mtp["weights_bytes_per_gpu"] - plain["weights_bytes_per_gpu"] == pytest.approx(
        mtp_weights_bytes(dep, 8))
    assert mtp["tokens"] < plain["tokens"]


def _run(argv):
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    return out.getvalue()


def test_serve_mtp_reports_acceptance_per_position_and_beats_plain_decode(capsys):
    plain = json.loads(_run(SERVE))
    per = json.loads(_run([*SERVE, "--speculative", "mtp", "--spec-tokens", "3",
                           "--accept-rate", "0.9,0.75,0.6"]))  # fmt: skip
    s = per["speculative"]
    assert s["method"] == "mtp" and s["accept_rate_per_position"] == [0.9, 0.75, 0.6]
    assert s["expected_tokens_per_step"] == pytest.approx(1 + 0.9 + 0.675 + 0.405)
    assert s["accept_rate_source"] == "given"
    assert per["tpot_s"]["mean"] < plain["tpot_s"]["mean"]
    default = json.loads(_run([*SERVE, "--speculative", "mtp", "--spec-tokens", "1"]))
    assert default["speculative"]["accept_rate_per_position"] == [FIRST_POSITION_ACCEPT]
    assert "DeepSeek-V3 report" in default["speculative"]["accept_rate_source"]


@pytest.mark.parametrize("extra, needle", [
    (["--model", "llama3-8b", "--speculative", "mtp", "--spec-tokens", "2"], "no MTP layers"),
    (["--speculative", "mtp", "--spec-tokens", "2", "--accept-rate", "0.9,0.8,0.7"], "3 rates"),
    (["--speculative", "mtp", "--spec-tokens", "4"], "1 to 3 draft tokens"),
    (["--speculative", "mtp", "--spec-tokens", "2", "--accept-rate", "0.9,1.2"], "--accept-rate"),
])  # fmt: skip
def test_bad_mtp_is_a_one_line_error(capsys, extra, needle):
    code = main([*SERVE, *extra])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and err.count("\n") == 1, err
    if "no MTP" in needle:  # names the models that have MTP layers and the other methods
        assert "deepseek-v3" in err and "ngram, eagle or draft:MODEL" in err


def test_a_model_without_mtp_layers_is_refused_by_the_simulator():
    llama = stack_deployment("llama3-8b", "h200", "vllm")
    with pytest.raises(GpuplanError, match="no MTP layers"):
        Speculator(Speculation(method="mtp", k=1, acceptance=0.8), llama)
    with pytest.raises(GpuplanError, match="no MTP layers"):
        serving_speculation("mtp", 1, None, llama.model)


def test_per_position_rates_must_number_k_and_mtp_without_a_model_needs_a_rate():
    with pytest.raises(GpuplanError, match=r"gives 3 rates for k=2 draft tokens"):
        Speculation(method="mtp", k=2, acceptance=(0.9, 0.8, 0.7))
    with pytest.raises(GpuplanError, match=r"mtp needs the model .*give --accept-rate"):
        serving_speculation("mtp", 2, None)  # no model: no published default to take
