"""Prefix caching: shared prefixes in the workload and the trace, hit rate, saved prefill."""

import json

import numpy as np
import pytest

from gpuplan.cli import main
from gpuplan.errors import GpuplanError
from gpuplan.sim.runtime.serving.engine import simulate
from gpuplan.sim.runtime.serving.on_stack import stack_deployment, stack_scheduler
from gpuplan.sim.runtime.serving.requests import Workload, make_workload, read_trace

DEP = stack_deployment("llama3-8b", "h200", "vllm")


def _run(policy, shared_prefix, n=200):
    load = make_workload(rate_per_s=8, n=n, prompt_tokens=2048, output_tokens=32, seed=0,
                         shared_prefix=shared_prefix)
    return load, simulate(DEP, stack_scheduler("vllm", policy=policy), load)


def test_a_shared_prefix_leaves_arrivals_and_lengths_as_they_were():
    plain, shared = (make_workload(rate_per_s=4, n=50, prompt_tokens="lognormal:900:1300",
                                   output_tokens=64, seed=3, shared_prefix=sp)
                     for sp in (None, (512, 4)))
    assert np.array_equal(plain.arrival_s, shared.arrival_s)
    assert np.array_equal(plain.prompt_tokens, shared.prompt_tokens)
    assert set(shared.prefix_id) <= {0, 1, 2, 3}
    assert (shared.prefix_tokens == np.minimum(512, shared.prompt_tokens - 1)).all()


@pytest.mark.parametrize("policy", ["continuous", "chunked"])
def test_every_request_after_the_first_of_its_prefix_finds_its_full_blocks_cached(policy):
    load, res = _run(policy, (1000, 4))
    pc = res.summary["prefix_cache"]
    first_of_group = len(set(load.prefix_id))
    assert pc["requests_hit"] == load.n - first_of_group
    assert pc["saved_prefill_tokens"] == (load.n - first_of_group) * (1000 // 16 * 16)
    assert pc["hit_rate"] == pytest.approx(pc["saved_prefill_tokens"] / (2048 * load.n))
    assert res.summary["conservation"]["ok"]


@pytest.mark.parametrize("policy", ["continuous", "chunked"])
def test_cached_prefixes_cut_the_time_to_first_token(policy):
    _, plain = _run(policy, None)
    _, cached = _run(policy, (1536, 2))
    assert "prefix_cache" not in plain.summary
    assert cached.summary["ttft_s"]["p50"] < 0.6 * plain.summary["ttft_s"]["p50"]


def test_a_trace_carries_prefixes_and_a_bad_one_is_one_line(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens,prefix_id,prefix_tokens\n"
                    "0,100,5,7,64\n0.1,120,5,7,64\n")
    load = read_trace(path)
    assert load.prefix_id.tolist() == [7, 7] and load.prefix_tokens.tolist() == [64, 64]
    path.write_text("arrival_s,prompt_tokens,output_tokens,prefix_id\n0,100,5,7\n")
    with pytest.raises(GpuplanError, match="together"):
        read_trace(path)
    with pytest.raises(GpuplanError, match="less than its prompt_tokens"):
        Workload(arrival_s=np.zeros(1), prompt_tokens=np.array([10]), output_tokens=np.array([2]),
                 prefix_id=np.array([0]), prefix_tokens=np.array([10]))


def test_serve_reports_the_prefix_cache(capsys):
    argv = ["serve", "--model", "llama3-8b", "--gpu", "h200", "--rate", "4", "--prompt-tokens",
            "1024", "--output-tokens", "8", "--requests", "40", "--shared-prefix", "512:2"]
    assert main(argv) == 0
    assert "prefix cache:" in capsys.readouterr().out
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["prefix_cache"]["requests_hit"] == 38
    assert main([*argv[:-1], "512"]) == 2
    assert "TOKENS:GROUPS" in capsys.readouterr().err
