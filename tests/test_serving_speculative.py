"""Speculative decoding: verified tokens per step, draft cost, and its inputs checked."""

import json

import pytest

from gpuplan.cli import main
from gpuplan.errors import GpuplanError
from gpuplan.sim.runtime.serving.on_stack import stack_deployment
from gpuplan.sim.runtime.serving.speculative import (
    Speculation,
    parse_speculation,
    speculative_decode,
)
from gpuplan.sim.runtime.serving.step_model import StepModel


@pytest.fixture(scope="module")
def step():
    return StepModel(stack_deployment("llama3-8b", "h200", "vllm"))


def test_tokens_per_step_is_leviathan_eq_1_by_brute_force():
    for k, a in ((1, 0.5), (4, 0.7), (7, 0.9)):
        # the expected accepted prefix plus the target's own token
        brute = sum(a**i for i in range(k + 1))
        assert Speculation(method="ngram", k=k, acceptance=a).tokens_per_step == pytest.approx(brute)
    assert Speculation(method="ngram", k=4, acceptance=1.0).tokens_per_step == 5
    assert Speculation(method="ngram", k=4, acceptance=0.0).tokens_per_step == 1


def test_the_verification_is_one_iteration_of_k_plus_1_tokens_a_sequence(step):
    spec = Speculation(method="ngram", k=3, acceptance=0.6)
    got = speculative_decode(step, spec, seqs=8, context=1000)
    assert got["draft_s"] == 0
    assert got["verify_s"] == step.mixed_s(((4, 1000, 8),), 0, 0, 32, replay=True)
    assert got["tpot_s"] == pytest.approx(got["step_s"] / spec.tokens_per_step)
    # a memory-bound single stream verifies 4 tokens for about the price of one decode
    one = speculative_decode(step, spec, seqs=1, context=1000)
    assert one["verify_s"] < 1.2 * step.decode_s(1, 1001)
    assert one["tpot_s"] < step.decode_s(1, 1001)


def test_drafting_costs_by_method(step):
    eagle = speculative_decode(step, Speculation(method="eagle", k=4, acceptance=0.7),
                               seqs=1, context=1000)
    assert 0 < eagle["draft_s"] < step.decode_s(1, 1001)  # four one-block passes
    draft = StepModel(stack_deployment("llama2-7b", "h200", "vllm"))
    big = speculative_decode(step, Speculation(method="draft", k=4, acceptance=0.7), seqs=1,
                             context=1000, draft_step=draft)
    assert big["draft_s"] == pytest.approx(sum(draft.decode_s(1, 1001 + j) for j in range(4)))
    with pytest.raises(GpuplanError, match="draft model"):
        speculative_decode(step, Speculation(method="draft", k=2, acceptance=0.5), seqs=1,
                           context=10)


@pytest.mark.parametrize("text", ["eagle:4:1.5", "eagle:4:-0.1", "medusa:4:0.5", "eagle:x:0.5",
                                  "eagle:4", "eagle:4:nan"])
def test_bad_speculation_is_a_one_line_error(text):
    with pytest.raises(GpuplanError) as err:
        parse_speculation(text)
    assert "\n" not in str(err.value)


def test_serve_edge_prints_speculative_speed(capsys):
    assert main(["serve", "edge", "--model", "llama3-8b", "--gpu", "h200", "--batch", "1",
                 "--weight-dtype", "bf16", "--speculative", "ngram:3:0.6", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["rows"][0]
    assert row["spec_tokens_per_step"] == pytest.approx(2.176)
    assert row["spec_tokens_per_s"] > row["tokens_per_s"]
    assert main(["serve", "edge", "--model", "llama3-8b", "--gpu", "h200",
                 "--speculative", "eagle:4:2"]) == 2
    assert "acceptance" in capsys.readouterr().err
