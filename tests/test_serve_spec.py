"""Speculative decoding inside the serving simulator: its step cost, tokens, memory and errors."""

import json
import math

import numpy as np
import pytest

from gpuplan.cli import main
from gpuplan.errors import GpuplanError
from gpuplan.sim.runtime.serving.deployment import SchedulerConfig, deployment
from gpuplan.sim.runtime.serving.engine import simulate
from gpuplan.sim.runtime.serving.kv_cache import kv_capacity
from gpuplan.sim.runtime.serving.requests import Workload, make_workload
from gpuplan.sim.runtime.serving.speculative import (
    Speculation,
    Speculator,
    serving_speculation,
    verify_and_draft_s,
)
from gpuplan.sim.runtime.serving.step_model import StepModel

DEP = deployment("llama3-8b", "h100-sxm")
SCHED = SchedulerConfig(policy="continuous", max_seqs=64)


def _one_request(prompt: int, output: int) -> Workload:
    return Workload(arrival_s=np.zeros(1), prompt_tokens=np.array([prompt]),
                    output_tokens=np.array([output]))  # fmt: skip


@pytest.mark.parametrize("method", ["ngram", "eagle"])
def test_acceptance_0_is_one_token_a_step_at_the_verify_and_draft_price(method):
    prompt, output = 300, 40
    step = StepModel(DEP)
    spec = Speculator(Speculation(method=method, k=3, acceptance=0.0), DEP)
    got = simulate(DEP, SCHED, _one_request(prompt, output), step=step, speculator=spec)
    plain = simulate(DEP, SCHED, _one_request(prompt, output), step=step)
    # decode iteration j reads the prompt, the j tokens decoded before it, and its own
    parts = [verify_and_draft_s(step, spec.spec, None, seqs=1, cached_tokens=prompt + j,
                                replay=DEP.cuda_graph) for j in range(output - 1)]  # fmt: skip
    decode = sum(step.decode_s(1, prompt + j + 1) for j in range(output - 1))
    span = got.request_columns["finish_s"][0] - got.request_columns["first_token_s"][0]
    plain_span = plain.request_columns["finish_s"][0] - plain.request_columns["first_token_s"][0]
    assert plain_span == pytest.approx(decode, rel=1e-9)
    # plain decode's cost, plus what verifying k + 1 tokens adds to it, plus the drafting
    verify, draft = sum(v for v, _ in parts), sum(d for _, d in parts)
    assert span == pytest.approx(verify + draft, rel=1e-9)
    assert verify > decode  # k + 1 tokens a step cost more than one, though not k + 1 times
    assert verify < 2 * decode
    assert (draft > 0) == (method == "eagle")
    s = got.summary["speculative"]
    assert s["mean_accepted_tokens_per_step"] == 1.0 and s["steps"] == output - 1
    assert s["draft_cost_share"] == pytest.approx(draft / (verify + draft))


@pytest.mark.parametrize("policy", ["continuous", "chunked"])
def test_a_higher_acceptance_never_lowers_throughput(policy):
    sched = SchedulerConfig(policy=policy, max_seqs=32)
    load = make_workload(rate_per_s=math.inf, n=48, prompt_tokens=256, output_tokens=128, seed=1)
    step = StepModel(DEP)
    rates = []
    for a in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0):
        spec = Speculator(Speculation(method="eagle", k=4, acceptance=a), DEP)
        rates.append(simulate(DEP, sched, load, step=step, speculator=spec,
                              timeline=False).summary["output_tokens_per_s"])  # fmt: skip
    assert all(b >= a for a, b in zip(rates, rates[1:], strict=False)), rates
    assert rates[-1] > 2 * rates[0]  # five tokens a step against one


def test_accepted_tokens_per_step_follow_the_expectation():
    spec = Speculator(Speculation(method="ngram", k=4, acceptance=0.7), DEP)
    load = make_workload(rate_per_s=20, n=40, prompt_tokens=128, output_tokens=600, seed=0)
    s = simulate(DEP, SCHED, load, speculator=spec, timeline=False).summary["speculative"]
    expected = (1 - 0.7**5) / (1 - 0.7)
    assert s["expected_tokens_per_step"] == pytest.approx(expected)
    # below it only by the surplus of each request's last step (< E tokens in ~217 steps)
    assert expected - 0.03 < s["mean_accepted_tokens_per_step"] <= expected


def test_the_kv_cache_holds_the_drafters():
    plain = kv_capacity(DEP, SCHED)
    ngram = kv_capacity(DEP, SCHED, Speculator(Speculation(method="ngram", k=3, acceptance=0.5), DEP))
    eagle = kv_capacity(DEP, SCHED, Speculator(Speculation(method="eagle", k=3, acceptance=0.5), DEP))
    big = deployment("llama3-70b", "h100-sxm", tp=4)
    draft = Speculator(Speculation(method="draft", k=3, acceptance=0.5), big,
                       draft=deployment("llama3-8b", "h100-sxm", tp=4))
    assert ngram.blocks == plain.blocks
    assert eagle.blocks < plain.blocks and eagle.weights_bytes > plain.weights_bytes
    without, with_draft = kv_capacity(big, SCHED), kv_capacity(big, SCHED, draft)
    # 8B's 32 layers beside 70B's 80, each of 8 KV heads: 112/80 of the bytes a token
    assert with_draft.block_bytes == pytest.approx(without.block_bytes * 112 / 80)
    assert with_draft.blocks < without.blocks


def _serve(capsys, *extra):
    code = main(["serve", "--model", "llama3-8b", "--gpu", "h100-sxm", "--rate", "5",
                 "--prompt-tokens", "256", "--output-tokens", "64", "--requests", "20", *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("extra, needle", [
    (["--speculative", "ngram", "--spec-tokens", "4", "--accept-rate", "1.5"], "--accept-rate"),
    (["--speculative", "ngram", "--spec-tokens", "4", "--accept-rate", "-0.1"], "--accept-rate"),
    (["--speculative", "ngram", "--spec-tokens", "4", "--accept-rate", "nan"], "--accept-rate"),
    (["--speculative", "eagle", "--spec-tokens", "0", "--accept-rate", "0.5"], "--spec-tokens"),
    (["--speculative", "eagle"], "--spec-tokens"),
    (["--speculative", "draft:llama2-7b", "--spec-tokens", "3", "--accept-rate", "0.6"],
     "vocab_size=32000"),
    (["--speculative", "draft", "--spec-tokens", "3", "--accept-rate", "0.6"], "draft:MODEL"),
    (["--speculative", "medusa", "--spec-tokens", "3", "--accept-rate", "0.6"], "ngram, eagle"),
    (["--speculative", "ngram", "--spec-tokens", "3", "--accept-rate", "0.6", "--policy",
      "static"], "continuous or chunked"),
    (["--accept-rate", "0.6"], "go with --speculative"),
])  # fmt: skip
def test_bad_speculation_is_a_one_line_error(capsys, extra, needle):
    code, _, err = _serve(capsys, *extra)
    assert code == 2 and needle in err and err.count("\n") == 1, err


@pytest.mark.parametrize("extra, needle", [
    (["--spec-tokens", "3"], "go with --speculative"),
    (["--speculative", "draft:llama2-7b", "--spec-tokens", "3", "--accept-rate", "0.6"],
     "vocab_size=32000"),
])  # fmt: skip
def test_serve_plan_bad_speculation_is_a_one_line_error(capsys, extra, needle):
    code = main(["serve", "plan", "--model", "llama3-8b", "--gpu", "h100-sxm", "--rate", "5",
                 "--slo-ttft-s", "1", "--slo-tpot-s", "0.05", *extra])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and needle in err and err.count("\n") == 1, err


def test_serve_reports_the_speculation(capsys):
    code, out, _ = _serve(capsys, "--speculative", "eagle", "--spec-tokens", "3",
                          "--accept-rate", "0.6", "--json", "--no-timing")  # fmt: skip
    assert code == 0
    s = json.loads(out)["speculative"]
    assert s["method"] == "eagle" and s["spec_tokens"] == 3 and s["accept_rate"] == 0.6
    assert 1 < s["mean_accepted_tokens_per_step"] <= s["expected_tokens_per_step"]
    assert 0 < s["draft_cost_share"] < 1
    code, text, _ = _serve(capsys, "--speculative", "eagle", "--spec-tokens", "3",
                           "--accept-rate", "0.6")  # fmt: skip
    assert code == 0 and "speculative decoding (eagle, 3 tokens proposed a step" in text


def test_serving_speculation_parses_the_flags():
    spec, draft = serving_speculation("draft:llama3-8b", 4, 0.7)
    assert (spec.method, spec.k, spec.acceptance, draft) == ("draft", 4, 0.7, "llama3-8b")
    with pytest.raises(GpuplanError, match="ngram, eagle or draft:MODEL"):
        serving_speculation("ngram:llama3-8b", 4, 0.7)


def test_serve_plan_offers_speculation_when_asked():
    from gpuplan.sim.runtime.serving.plan import plan
    from gpuplan.sim.runtime.serving.plan_space import SearchSpace, Slo

    lengths = (np.full(120, 256), np.full(120, 96))
    space = SearchSpace(tps=(1,), formats=(("bf16", "bf16"),), max_seqs=(64,), ratios=(),
                        max_gpus=8, speculation=serving_speculation("ngram", 4, 0.8))  # fmt: skip
    kw = {"rate_per_s": 20.0, "slo": Slo(ttft_s=0.5, tpot_s=0.006, percentile=90),
          "lengths": lengths, "requests": 120, "top": 2}  # fmt: skip
    got = plan("llama3-8b", "h100-sxm", space=space, **kw)
    assert set(got.evaluated["speculative"]) == {False, True}
    # a TPOT target below a plain decode step only speculation meets
    assert got.best["speculative"].all()
    assert (got.best["tpot_p90_s"] <= 0.006).all()
    ev = got.evaluated
    assert not ev[~ev["speculative"] & ~ev["above_top_cost"]]["meets"].any()
