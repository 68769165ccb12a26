"""Honest about load (``serving.load``): no served rate or band above the offered load, every
saturated run flagged in its first line with the queue's growth, no cost per token priced at a
load the deployment cannot serve, the plan's chosen row's band against the SLO, and stacks
without a server refused by ``serve``."""

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.cli import main
from gpuplan.sim.runtime.serving.load import capped, load_verdict
from gpuplan.validate.bands import documents as bands

SMALL = ["serve", "--model", "llama3-8b", "--gpu", "h100-sxm"]


def serve(capsys, *argv, json_out=True):
    code = main([*argv, *(["--json"] if json_out else [])])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out) if json_out else out


def _frame(arrival, first, finish, output=10):
    n = len(arrival)
    return {"arrival_s": np.asarray(arrival, float), "first_token_s": np.asarray(first, float),
            "finish_s": np.asarray(finish, float), "output_tokens": np.full(n, output),
            "status": np.array(["finished"] * n, dtype=object)}  # fmt: skip


def test_a_queue_that_grows_is_saturated_with_its_growth_and_the_rate_taken_in():
    # 10 requests/s offered, taken in at exactly 4/s in arrival order: the queue grows 6/s
    arrival = np.arange(400) / 10.0
    first = np.arange(400) / 4.0 + 0.1
    v = load_verdict(_frame(arrival, first, first + 1.0), None, rate_per_s=10.0)
    assert v["saturated"] is True
    assert v["queue_growth_per_s"] == pytest.approx(6.0, rel=0.05)
    assert v["sustainable_requests_per_s"] == pytest.approx(4.0, rel=0.02)
    assert v["sustainable_output_tokens_per_s"] == pytest.approx(40.0, rel=0.02)


def test_a_queue_that_keeps_up_is_not_saturated():
    arrival = np.sort(np.random.default_rng(0).uniform(0, 40, 400))
    v = load_verdict(_frame(arrival, arrival + 0.05, arrival + 1.0), None, rate_per_s=10.0)
    assert v["saturated"] is False and abs(v["queue_growth_per_s"]) < 0.1
    assert v["sustainable_requests_per_s"] is None


def test_an_offline_run_offers_no_rate_and_is_not_judged():
    v = load_verdict(_frame(np.zeros(5), np.arange(5.0), np.arange(5.0) + 1), None,
                     rate_per_s=float("inf"))  # fmt: skip
    assert v["offered_requests_per_s"] is None and v["saturated"] is False


def test_served_rates_and_their_bands_are_cut_at_the_offered_load():
    verdict = {"offered_requests_per_s": 5.0, "offered_output_tokens_per_s": 500.0}
    doc = capped({"requests_per_s": 5.3, "output_tokens_per_s": 480.0}, verdict) | verdict
    assert doc["requests_per_s"] == 5.0 and doc["output_tokens_per_s"] == 480.0
    band = bands.serve_bands(doc, stack="vllm", device="h100-sxm")["error_band"]
    assert band["requests_per_s"][1] <= 5.0 and band["output_tokens_per_s"][1] <= 500.0
    assert band["output_tokens_per_s"][0] < 480.0  # the low end stays: a slower truth is served less
    assert "offered_requests_per_s" not in band  # the load asked for is not a prediction


def test_the_issue_run_at_10_per_s_says_it_is_saturated_first(capsys):
    argv = ["serve", "--model", "llama3-70b", "--gpu", "h100-sxm", "--tp", "4", "--rate", "10",
            "--prompt-tokens", "2000", "--output-tokens", "300", "--requests", "400"]  # fmt: skip
    doc = serve(capsys, *argv)
    assert doc["saturated"] is True and doc["queue_growth_per_s"] > 1.0
    assert 0 < doc["sustainable_requests_per_s"] < 10
    text = serve(capsys, *argv, json_out=False)
    assert text.splitlines()[0].startswith("SATURATED: 10 requests/s offered")


def test_a_saturated_report_prices_no_token_at_the_load_it_cannot_serve(capsys, tmp_path):
    out = tmp_path / "r.md"
    code = main(["report", *SMALL, "--tp", "1", "--rate", "60", "--prompt-tokens", "1000",
                 "--output-tokens", "200", "--requests", "600", "--max-seqs", "32",
                 "--out", str(out)])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    text = out.read_text()
    assert "| SATURATED |" in text
    cost = next(line for line in text.splitlines() if "GPU cost per million" in line)
    assert "requests/s it sustains, not at the 60 offered (saturated)" in cost


LOADS = st.fixed_dictionaries({
    "load": st.sampled_from([0.3, 0.5, 2.5, 4.0]),  # times the deployment's offline capacity
    "prompt": st.sampled_from([128, 512, 1024]),
    "output": st.sampled_from([16, 64, 128]),
    "max_seqs": st.sampled_from([8, 16, 32]),
    "replicas": st.sampled_from([1, 2]),
    "arrival": st.sampled_from(["poisson", "gamma"]),
    "seed": st.integers(0, 50),
})  # fmt: skip


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(LOADS)
def test_no_served_rate_above_the_offered_and_every_saturated_run_flagged(capsys, case):
    """Over random loads: no rate (point or band) above the offered one, at any load; a load of
    2.5x or more of the deployment's capacity (its offline throughput, every request at once) is
    flagged saturated and sustains less than is offered; one of half its capacity or less is not.
    Enough requests that the batch limit fills before the last arrival (the regime the
    definition covers: ``serving.load``'s limits)."""
    c = case
    argv = [*SMALL, "--prompt-tokens", str(c["prompt"]), "--output-tokens", str(c["output"]),
            "--max-seqs", str(c["max_seqs"]), "--replicas", str(c["replicas"]),
            "--requests", str(30 * c["max_seqs"] * c["replicas"]), "--seed", str(c["seed"])]  # fmt: skip
    offline = serve(capsys, *argv, "--rate", "inf")
    capacity = offline["finished"] / offline["span_s"]
    rate = c["load"] * capacity
    doc = serve(capsys, *argv, "--rate", f"{rate:.6g}", "--arrival", c["arrival"])
    req, tok = doc["offered_requests_per_s"], doc["offered_output_tokens_per_s"]
    band = doc["error_band"]
    for key, top in (("requests_per_s", req), ("output_tokens_per_s", tok),
                     ("sustainable_requests_per_s", req),
                     ("sustainable_output_tokens_per_s", tok)):  # fmt: skip
        if doc.get(key) is not None:
            assert doc[key] <= top * (1 + 1e-12), key
            assert band[key][1] <= top * (1 + 1e-12), key
    if c["load"] >= 2.5:
        assert doc["saturated"] is True, (rate, capacity, doc["queue_growth_per_s"])
        assert doc["queue_growth_per_s"] > 0 and doc["sustainable_requests_per_s"] < req
    if c["load"] <= 0.5:
        assert doc["saturated"] is False, (rate, capacity, doc["queue_growth_per_s"])


def test_the_plan_says_whether_its_chosen_rows_band_keeps_within_the_slo(capsys):
    argv = ["serve", "plan", "--model", "llama3-8b", "--gpu", "h100-sxm", "--rate", "20",
            "--slo-ttft-s", "0.5", "--requests", "300", "--tp", "1", "--top", "3"]  # fmt: skip
    tight = serve(capsys, *argv, "--slo-tpot-s", "0.035")
    first = tight["configs"][0]
    top = first["error_band"]["tpot_p99_s"][1]
    assert first["tpot_p99_s"] <= 0.035 < top  # meets the SLO as predicted, its band does not
    assert tight["chosen_band_within_slo"] is False
    assert tight["chosen_band_crossings"] == [{"metric": "tpot_p99_s", "value": first["tpot_p99_s"],
                                               "band_high": top, "slo": 0.035}]  # fmt: skip
    text = serve(capsys, *argv, "--slo-tpot-s", "0.035", json_out=False)
    assert "its p10-p90 band does not: tpot_p99_s" in text
    loose = serve(capsys, *argv, "--slo-tpot-s", "0.2")
    assert loose["chosen_band_within_slo"] is True and not loose["chosen_band_crossings"]


@pytest.mark.parametrize("stack", ["hf-transformers", "pytorch"])
@pytest.mark.parametrize("sub", [[], ["plan", "--slo-ttft-s", "1", "--slo-tpot-s", "1"]])
def test_a_stack_without_a_server_is_refused_in_one_line(capsys, stack, sub):
    code = main(["serve", *sub, "--model", "llama3-8b", "--gpu", "h100-sxm", "--stack", stack,
                 "--rate", "1", "--prompt-tokens", "128", "--output-tokens", "16"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert f"--stack {stack} has no server" in err and "vllm" in err and "sglang" in err
    assert "trt-llm" in err and "gpuplan-server" in err
