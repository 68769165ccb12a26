"""Feasibility first: a plan that does not fit exits 1 with one line naming the nearest change
that fits (and that change does fit), prints no figure unless --allow-infeasible asks for the
what-if, and then marks every line (cli.feasibility, cli.estimate_fit)."""

from __future__ import annotations

import json

import pytest

from gpuplan.cli import main
from gpuplan.cli.feasibility import WHAT_IF


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _argv_of(fix: dict) -> list[str]:
    out = []
    for k, v in fix.items():
        out += [k] if v is True else [k, str(v)]
    return out


TRAIN = ["train", "--model", "llama3-70b", "--gpu", "h100-sxm", "--gpus", "8"]


def test_a_training_plan_that_does_not_fit_exits_1_with_the_nearest_fit(capsys):
    code, out, err = run(capsys, *TRAIN)
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and err.startswith("gpuplan: does not fit: llama3-70b needs")
    assert "nearest change that fits: --gpus" in err and "days" not in err
    code, out, _ = run(capsys, *TRAIN, "--json")
    doc = json.loads(out)
    assert code == 1 and doc["feasible"] is False and doc["nearest_fix"]["--gpus"]
    # the change it names fits: train prices it, exit 0
    argv = ["train", "--model", "llama3-70b", "--gpu", "h100-sxm", *_argv_of(doc["nearest_fix"])]
    code, out, _ = run(capsys, *argv, "--json")
    assert code == 0 and json.loads(out)["feasible"] is True and json.loads(out)["fits"]


def test_no_time_to_train_or_cost_for_a_plan_that_does_not_fit(capsys):
    code, out, err = run(capsys, *TRAIN, "--tokens", "1e12")
    assert code == 1 and out == "" and "$" not in err


def test_allow_infeasible_prices_the_what_if_and_marks_every_line(capsys):
    code, out, _ = run(capsys, *TRAIN, "--allow-infeasible")
    assert code == 0
    lines = [line for line in out.splitlines() if line.strip()]
    assert lines and all(line.startswith(WHAT_IF) for line in lines)
    code, out, _ = run(capsys, *TRAIN, "--allow-infeasible", "--json")
    assert code == 0 and json.loads(out)["feasible"] is False


def test_a_plan_that_fits_is_unchanged(capsys):
    code, out, _ = run(capsys, "train", "--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "8",
                       "--zero", "3", "--json")  # fmt: skip
    assert code == 0 and json.loads(out)["feasible"] is True


@pytest.mark.parametrize("argv,field", [
    (["decode-step", "--model", "llama3-8b", "--batch", "512", "--context", "8192"], "--batch"),
    (["train-step", "--model", "llama3-8b", "--seq", "4096", "--micro-batch", "4",
      "--recompute", "none"], "--gpus"),
    (["decode-step", "--model", "llama3-70b", "--batch", "8", "--context", "2048"], "--tp"),
])  # fmt: skip
def test_estimate_of_a_step_that_does_not_fit_names_the_fix(capsys, argv, field):
    code, out, err = run(capsys, "estimate", *argv)
    assert code == 1 and out == "" and err.startswith("gpuplan: does not fit:")
    code, out, _ = run(capsys, "estimate", *argv, "--json")
    assert code == 1 and field in json.loads(out)["nearest_fix"]


def test_estimate_batch_fix_fits(capsys):
    argv = ["estimate", "decode-step", "--model", "llama3-8b", "--batch", "512", "--context", "8192"]
    _code, out, _ = run(capsys, *argv, "--json")
    fix = json.loads(out)["nearest_fix"]
    code, out, _ = run(capsys, *argv, *_argv_of(fix), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["fits"] and doc["params"]["batch"] == int(fix["--batch"])
    # the nearest: twice that batch does not fit
    code, _out, _ = run(capsys, *argv[:-4], "--batch", str(2 * int(fix["--batch"])),
                        "--context", "8192", "--json")  # fmt: skip
    assert code == 1


def test_diagnose_train_of_a_setup_that_does_not_fit_starts_from_the_fix(capsys):
    code, out, _ = run(capsys, "diagnose", "train", "--model", "llama3-70b", "--gpu", "h100-sxm",
                       "--gpus", "8", "--json")  # fmt: skip
    doc = json.loads(out)
    assert code == 0 and doc["notes"][0].startswith("as given it does not fit")
    assert doc["baseline"]["peak_memory_per_gpu_bytes"] <= 80e9


def test_estimate_of_weights_beyond_a_node_points_to_serve_plan_without_a_fix(capsys):
    argv = ["estimate", "decode-step", "--model", "llama3.1-405b", "--gpu", "l4", "--batch", "1",
            "--context", "2048"]  # fmt: skip
    code, out, err = run(capsys, *argv)
    assert code == 1 and out == "" and err.count("\n") == 1
    assert "need more than one node: `gpuplan serve plan --model llama3.1-405b --gpu l4" in err
    code, out, _ = run(capsys, *argv, "--json")
    assert code == 1 and json.loads(out)["nearest_fix"] == {}
