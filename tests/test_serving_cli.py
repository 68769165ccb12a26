"""``gpuplan serve``, ``serve plan`` and ``serve edge``: JSON keys as the issue lists them,
tables for people, one-line errors with exit code 2."""

import json

import pytest

from gpuplan.cli import main

BASE = ["serve", "--model", "llama2-7b", "--gpu", "a100-sxm-80gb"]
STAT_KEYS = {"mean", "p50", "p90", "p99"}


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_serve_json_has_the_issue_keys(capsys):
    code, out, err = run(capsys, *BASE, "--rate", "4", "--prompt-tokens", "256",
                         "--output-tokens", "32", "--requests", "200", "--json")  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    for key in ("ttft_s", "tpot_s", "e2e_s"):
        assert set(doc[key]) == STAT_KEYS
    for key in ("output_tokens_per_s", "requests_per_s", "finished", "rejected"):
        assert key in doc
    assert doc["finished"] == 200 and doc["rejected"] == 0
    assert doc["config"]["rate_per_s"] == 4


def test_serve_prints_a_latency_table(capsys):
    code, out, _ = run(capsys, *BASE, "--rate", "inf", "--prompt-tokens", "conversation",
                       "--output-tokens", "conversation", "--requests", "100",
                       "--policy", "chunked", "--weight-dtype", "int8")  # fmt: skip
    assert code == 0
    assert "metric" in out and "ttft_s" in out and "p99" in out and "throughput" in out
    assert "chunked batching" in out and "int8 weights" in out


def test_serve_replays_a_trace_and_writes_the_request_table(capsys, tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text("\n".join(
        json.dumps({"arrival_s": i * 0.5, "prompt_tokens": 100 + i, "output_tokens": 20})
        for i in range(30)
    ))  # fmt: skip
    table = tmp_path / "requests.csv"
    code, out, err = run(capsys, *BASE, "--trace", str(trace), "--requests-csv", str(table),
                         "--json")  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["finished"] == 30
    assert table.read_text().startswith("request_id,replica,decode_replica,arrival_s")


def test_serve_disaggregated_and_with_several_replicas(capsys):
    args = ["--rate", "10", "--prompt-tokens", "512", "--output-tokens", "64", "--requests",
            "200", "--json"]  # fmt: skip
    code, out, _ = run(capsys, *BASE, *args, "--disaggregate", "1:2")
    assert code == 0 and json.loads(out)["config"]["gpus"] == 3
    code, out, _ = run(capsys, *BASE, *args, "--replicas", "3", "--router",
                       "shortest_queue_tokens")  # fmt: skip
    assert code == 0 and json.loads(out)["finished"] == 200


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rate", "0", "--prompt-tokens", "5", "--output-tokens", "5"], "--rate"),
        (["--rate", "-2", "--prompt-tokens", "5", "--output-tokens", "5"], "--rate"),
        (["--rate", "1", "--prompt-tokens", "5", "--output-tokens", "0"], "--output-tokens"),
        (["--rate", "1", "--prompt-tokens", "5"], "--output-tokens"),
        (["--rate", "1", "--prompt-tokens", "gauss:1", "--output-tokens", "5"], "uniform:LO:HI"),
    ],
)
def test_bad_serving_input_is_one_line_and_exit_code_2(capsys, argv, message):
    code, out, err = run(capsys, *BASE, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_a_model_that_does_not_fit_names_the_gpus_it_needs(capsys):
    code, _, err = run(capsys, "serve", "--model", "llama2-70b", "--gpu", "a100-sxm-80gb",
                       "--rate", "1", "--prompt-tokens", "5", "--output-tokens", "5")  # fmt: skip
    assert code == 1 and "it needs tp=2 (2 GPUs per replica)" in err  # cannot run: exit 1


def test_serve_without_a_model_asks_for_one(capsys):
    code, _, err = run(capsys, "serve", "--rate", "1")
    assert code == 2 and "--model, --gpu" in err


def test_serve_plan_json_lists_the_cheapest_configurations(capsys):
    code, out, err = run(capsys, "serve", "plan", "--model", "llama3-8b", "--gpu", "h100-sxm",
                         "--rate", "8", "--slo-ttft-s", "0.5", "--slo-tpot-s", "0.05",
                         "--percentile", "90", "--tp", "1", "--max-seqs", "64",
                         "--no-disaggregation", "--requests", "200", "--top", "2",
                         "--json")  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    assert 1 <= len(doc["configs"]) <= 2
    row = doc["configs"][0]
    for key in ("tp", "gpus", "replicas", "weight_dtype", "usd_per_m_output_tokens",
                "ttft_p90_s", "tpot_p90_s"):  # fmt: skip
        assert key in row
    assert row["ttft_p90_s"] <= 0.5 and row["tpot_p90_s"] <= 0.05


def test_serve_plan_with_an_unmeetable_slo_says_so(capsys):
    code, out, err = run(capsys, "serve", "plan", "--model", "llama3-8b", "--gpu", "h100-sxm",
                         "--rate", "8", "--slo-ttft-s", "0.0001", "--slo-tpot-s", "0.05",
                         "--tp", "1", "--max-seqs", "64", "--no-disaggregation",
                         "--requests", "100")  # fmt: skip
    assert code == 2 and out == "" and "no configuration" in err


def test_serve_edge_prints_tokens_per_second_and_the_bound(capsys):
    code, out, _ = run(capsys, "serve", "edge", "--model", "llama2-7b", "--gpu", "m2-ultra",
                       "--weight-dtype", "int4", "--batch", "1,2")  # fmt: skip
    assert code == 0 and "tokens_per_s" in out and "memory" in out
    code, out, _ = run(capsys, "serve", "edge", "--model", "llama2-7b", "--gpu",
                       "jetson-agx-orin-64gb", "--json")  # fmt: skip
    rows = json.loads(out)["rows"]
    assert {r["weight_dtype"] for r in rows} == {"bf16", "fp8", "int8", "int4"}


def test_serve_with_cudnn_attention_decodes_long_contexts_faster(capsys):
    argv = [*BASE, "--rate", "8", "--prompt-tokens", "3000", "--output-tokens", "64",
            "--requests", "100", "--seed", "1", "--json"]  # fmt: skip
    tpot = {}
    for kernel in ("flash2", "cudnn"):
        code, out, err = run(capsys, *argv, "--attention-kernel", kernel)
        assert code == 0, err
        tpot[kernel] = json.loads(out)["tpot_s"]["p50"]
    assert tpot["cudnn"] < tpot["flash2"]


def test_a_trace_without_rate_prints_its_table_at_the_traces_own_arrival_times(capsys, tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,128,16\n0.5,256,32\n"
                     "1.0,64,8\n2.0,512,16\n")  # fmt: skip
    code, out, err = run(capsys, *BASE, "--trace", str(trace))
    assert code == 0, err
    assert "4 requests at the trace's own arrival times: 4 finished" in out
    assert "arrival window" in out


def test_the_achieved_request_rate_is_over_the_arrival_window_not_the_drain(capsys):
    def served(rate: str, n: int) -> dict:
        code, out, err = run(capsys, *BASE, "--rate", rate, "--prompt-tokens", "256",
                             "--output-tokens", "256", "--requests", str(n), "--json")  # fmt: skip
        assert code == 0, err
        return json.loads(out)

    # one request a second, each running about two seconds: a few are still running when the
    # arrivals stop; the rate counts the requests finished within the arrival window over it
    kept_up = served("1", 200)
    window = kept_up["arrival_window_s"]
    assert kept_up["span_s"] - window > 1.0  # a drain longer than one arrival gap
    done_in_window = kept_up["requests_per_s"] * window
    assert done_in_window == pytest.approx(round(done_in_window), abs=1e-6)  # a count / window
    assert 190 <= round(done_in_window) < kept_up["finished"] == 200  # the drain does not count
    # overloaded: what finished while requests kept coming, never the offered 400/s
    flooded, capacity = served("400", 400), served("inf", 400)["requests_per_s"]
    assert flooded["requests_per_s"] <= 1.05 * capacity


def test_serve_prints_its_table_without_loading_pandas():
    import subprocess
    import sys

    code = ("import sys, io, contextlib; from gpuplan.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    assert main(['serve', '--model', 'llama2-7b', '--gpu', 'a100-sxm-80gb', '--rate', '4',"
            " '--prompt-tokens', '256', '--output-tokens', '16', '--requests', '50']) == 0\n"
            "print(sorted(m for m in ('pandas', 'pyarrow', 'matplotlib') if m in sys.modules))")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"  # the frames are built only when asked for (--requests-csv)
