"""What a fuzz run of the command line and the API found, each now one line and exit 2 (or a
refusal) instead of an internal error or a silent wrong number."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from gpuplan.cli import main
from gpuplan.errors import GpuplanError

ROOT = Path(__file__).resolve().parents[1]


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_an_abbreviated_flag_is_unknown_not_a_crash(capsys, tmp_path):
    code, _, err = run(capsys, "diagnose", "serve", "--model", "llama3-8b", "--gpu", "h200",
                       "--rate", "2", "--prompt", "100", "--requests", "20")  # fmt: skip
    assert code == 2 and "unrecognized arguments: --prompt 100" in err
    code, _, err = run(capsys, "report", "train", "--model", "llama3-8b", "--gpus", "8",
                       "--ou", str(tmp_path / "r.md"))  # fmt: skip
    assert code == 2 and err.count("\n") == 1 and list(tmp_path.iterdir()) == []


def test_report_serve_with_no_finished_request_is_one_line(capsys, tmp_path):
    code, _, err = run(capsys, "report", "serve", "--model", "llama3-8b", "--gpu", "h200",
                       "--rate", "0.0001", "--requests", "1", "--horizon-s", "0.001",
                       "--prompt-tokens", "100", "--output-tokens", "20",
                       "--out", str(tmp_path / "r.md"))  # fmt: skip
    assert code == 2 and "no request finished" in err and list(tmp_path.iterdir()) == []


def test_a_nested_object_in_a_calibration_is_one_line(capsys, tmp_path):
    fit = json.loads((ROOT / "gpuplan" / "hwmodels" / "data" / "calibration_h200.json").read_text())
    for name, value in fit["parameters"].items():
        bad = copy.deepcopy(fit)
        bad["parameters"][name] = {"nested": {"x": 1}} if isinstance(value, dict) else {"x": 1}
        path = tmp_path / "fit.json"
        path.write_text(json.dumps(bad))
        code, _, err = run(capsys, "estimate", "gemm", "--m", "64", "--n", "64", "--k", "64",
                           "--calibration", str(path))  # fmt: skip
        assert code == 2 and name in err, (name, err)


def test_a_capacity_factor_below_one_is_refused(capsys):
    code, _, err = run(capsys, "train", "--model", "mixtral-8x7b", "--gpus", "16",
                       "--capacity-factor", "0.01")  # fmt: skip
    assert code == 2 and "capacity_factor=0.01" in err


def test_search_refuses_a_negative_token_budget():
    from gpuplan.sim.parallel.search import search
    from gpuplan.sim.parallel.topology import cluster_for
    from gpuplan.workloads.presets import get_model

    with pytest.raises(GpuplanError, match="tokens="):
        search(get_model("llama3-8b"), cluster=cluster_for("h100-sxm"), gpus=8, global_batch=32,
               seq=2048, tokens=-1e12)  # fmt: skip
