"""``gpuplan estimate``: the default scenario, every kind, and the errors a user can meet."""

import json

import pytest

from gpuplan.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_default_scenario_prices_a_training_and_a_decode_step(capsys):
    code, out, _ = run(capsys, "estimate", "--json")
    doc = json.loads(out)["scenario"]
    assert code == 0 and [r["kind"] for r in doc] == ["train_step", "decode_step"]
    assert all(r["time_s"] > 0 and r["model"] == "llama3.2-3b" for r in doc)
    assert all(r["feasible"] and r["fits"] for r in doc)  # the default scenario runs
    assert all(r["tokens_per_s"] > 0 and 0 < r["mfu"] < 1 for r in doc)
    assert sum(i["time_s"] for i in doc[0]["items"]) == pytest.approx(doc[0]["time_s"])


@pytest.mark.parametrize(
    "argv",
    [
        ["gemm", "--m", "4096", "--n", "4096", "--k", "4096", "--dtype", "fp8"],
        ["attention", "--seq-q", "2048", "--pass", "fwd_bwd"],
        ["elementwise", "--op", "rmsnorm", "--tokens", "4096", "--hidden", "4096"],
        ["layer", "--model", "llama3-8b", "--seq", "1024", "--tp", "2"],
        ["train-step", "--model", "mixtral-8x7b", "--layers", "2", "--seq", "1024"],
        ["decode-step", "--model", "deepseek-v3", "--batch", "8", "--cuda-graph",
         "--allow-infeasible"],
        ["collective", "--op", "all_gather", "--world", "2", "--bytes", "1e6"],
        ["tp-mlp", "--hidden", "4096", "--ffn", "14336", "--tokens", "2048", "--tp", "2"],
    ],
)
def test_every_kind_prints_a_table_and_json(capsys, argv):
    code, out, _ = run(capsys, "estimate", *argv)
    assert code == 0 and "predicted time" in out
    code, out, _ = run(capsys, "estimate", *argv, "--json")
    assert code == 0 and json.loads(out)["time_s"] > 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["gemm", "--m", "8", "--n", "8"], "needs --k"),
        (["gemm", "--m", "8", "--n", "8", "--k", "8", "--seq", "4"], "does not use --seq"),
        (["layer", "--model", "llama3-8b", "--tp", "3"], "tp=3 does not divide n_heads=32"),
        (["gemm", "--m", "8", "--n", "8", "--k", "8", "--gpu", "h300"], "did you mean h200"),
        (["gemm", "--m", "8", "--n", "8", "--k", "8", "--dtype", "fp6"], "--dtype: invalid choice: 'fp6'"),
        (["gemm", "--m", "-8", "--n", "8", "--k", "8"], "must be greater than zero"),
        (["layer", "--model", "llama9-1b"], "unknown model"),
    ],
)
def test_bad_input_is_one_clear_line_and_exit_code_2(capsys, argv, message):
    code, out, err = run(capsys, "estimate", *argv)
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.startswith("gpuplan: error:") and message in err


def test_model_on_a_kernel_kind_is_a_one_line_error(capsys):
    code, _out, err = run(capsys, "estimate", "gemm", "--model", "llama3-8b")
    assert code != 0
    assert "estimate gemm does not use --model" in err and len(err.strip().splitlines()) == 1


def test_the_headline_mfu_counts_the_model_flops_training_counts(capsys):
    """One convention for MFU: estimate's model FLOPs of a training step (its items, recomputation
    left out) equal ``workloads.operators.training_flops``, which ``train`` uses."""
    from gpuplan.workloads.operators import training_flops
    from gpuplan.workloads.presets import get_model

    for recompute in ("none", "full"):
        code, out, _ = run(capsys, "estimate", "train-step", "--model", "llama3.2-3b", "--seq",
                           "2048", "--recompute", recompute, "--json")  # fmt: skip
        doc = json.loads(out)
        want = training_flops(get_model("llama3.2-3b"), batch=1, seq=2048)
        assert code == 0 and doc["model_flops"] == pytest.approx(want, rel=1e-9)
