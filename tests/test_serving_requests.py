"""Workloads for serving: seeded arrivals, length specs, traces, and their errors."""

import json

import numpy as np
import pytest

from gpuplan.errors import GpuplanError
from gpuplan.sim.runtime.serving.requests import (
    Workload,
    arrivals,
    conversation,
    lengths,
    make_workload,
    read_trace,
)


def test_poisson_arrivals_have_the_asked_mean_gap_and_start_at_zero():
    t = arrivals(4.0, 20_000, np.random.default_rng(0))
    assert t[0] == 0.0
    assert np.mean(np.diff(t)) == pytest.approx(0.25, rel=0.03)


def test_gamma_arrivals_keep_the_rate_and_are_burstier():
    rng = np.random.default_rng(1)
    gaps = np.diff(arrivals(4.0, 20_000, rng, kind="gamma", cv=3.0))
    assert gaps.mean() == pytest.approx(0.25, rel=0.1)
    assert gaps.std() / gaps.mean() == pytest.approx(3.0, rel=0.15)


def test_an_infinite_rate_offers_every_request_at_time_zero():
    assert not arrivals(float("inf"), 10, np.random.default_rng(0)).any()


@pytest.mark.parametrize("rate", [0.0, -1.0])
def test_a_rate_that_is_not_positive_is_an_error(rate):
    with pytest.raises(GpuplanError, match="rate_per_s"):
        arrivals(rate, 10, np.random.default_rng(0))


def test_length_specs_give_what_they_say():
    rng = np.random.default_rng(2)
    assert (lengths(128, 5, rng, what="p") == 128).all()
    u = lengths("uniform:10:20", 2000, rng, what="p")
    assert u.min() >= 10 and u.max() <= 20 and len(set(u)) == 11
    ln = lengths("lognormal:400:1600:3000", 20_000, rng, what="p")
    assert np.median(ln) == pytest.approx(400, rel=0.05)
    assert np.percentile(ln, 90) == pytest.approx(1600, rel=0.05)
    assert ln.max() <= 3000


@pytest.mark.parametrize("spec", ["uniform:5", "lognormal:10:5", "gaussian:3:4", "x:1"])
def test_a_bad_length_spec_is_an_error_listing_the_valid_forms(spec):
    with pytest.raises(GpuplanError, match="uniform:LO:HI"):
        lengths(spec, 3, np.random.default_rng(0), what="prompt_tokens")


def test_conversation_lengths_stay_within_4096_tokens_and_near_the_trace_medians():
    prompt, output = conversation(20_000, np.random.default_rng(3))
    assert (prompt + output <= 4096).all() and prompt.min() >= 1 and output.min() >= 1
    assert np.median(prompt) == pytest.approx(894, rel=0.05)
    assert np.median(output) == pytest.approx(197, rel=0.05)


def test_the_same_seed_gives_the_same_workload():
    a = make_workload(rate_per_s=3, n=50, prompt_tokens="conversation",
                      output_tokens="conversation", seed=7)  # fmt: skip
    b = make_workload(rate_per_s=3, n=50, prompt_tokens="conversation",
                      output_tokens="conversation", seed=7)  # fmt: skip
    assert (a.arrival_s == b.arrival_s).all() and (a.prompt_tokens == b.prompt_tokens).all()


def test_a_request_with_no_output_token_is_an_error():
    with pytest.raises(GpuplanError, match="output_tokens"):
        make_workload(rate_per_s=1, n=3, prompt_tokens=5, output_tokens=0)
    with pytest.raises(GpuplanError, match="at least 1 token"):
        Workload(arrival_s=np.zeros(2), prompt_tokens=np.array([3, 0]),
                 output_tokens=np.array([1, 1]))  # fmt: skip


def test_traces_read_from_csv_and_json_lines_with_vidur_names(tmp_path):
    csv_path = tmp_path / "t.csv"
    csv_path.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n1.5,10,3\n0.5,20,4\n")
    load = read_trace(csv_path)
    assert load.arrival_s.tolist() == [0.0, 1.0]  # sorted, shifted to start at zero
    assert load.prompt_tokens.tolist() == [20, 10]
    jsonl = tmp_path / "t.jsonl"
    rows = [{"prompt_tokens": 7, "output_tokens": 2}, {"prompt_tokens": 9, "output_tokens": 1}]
    jsonl.write_text("\n".join(json.dumps(r) for r in rows))
    load = read_trace(jsonl, rate_per_s=2.0)
    assert load.n == 2 and load.output_tokens.tolist() == [2, 1]


def test_a_trace_without_arrivals_needs_a_rate_and_bad_cells_are_named(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("prompt_tokens,output_tokens\n5,5\n")
    with pytest.raises(GpuplanError, match="give --rate"):
        read_trace(path)
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,five,5\n")
    with pytest.raises(GpuplanError, match="request 1: prompt_tokens='five'"):
        read_trace(path)
    path.write_text("arrival_s,prompt_tokens\n0,5\n")
    with pytest.raises(GpuplanError, match="no output_tokens"):
        read_trace(path)


def test_a_binary_trace_is_one_line_naming_the_file(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_bytes(b"\x89PNG\x00\xff\xfe")
    with pytest.raises(GpuplanError, match="not UTF-8 text"):
        read_trace(path, rate_per_s=1.0)
