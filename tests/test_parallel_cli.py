"""``gpuplan train`` and ``gpuplan search train``: JSON keys, tables, one-line errors."""

import json

from gpuplan.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_train_json_has_the_headline_keys_and_the_breakdown(capsys):
    code, out, err = run(
        capsys, "train", "--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "16",
        "--tp", "2", "--pp", "2", "--global-batch", "32", "--seq", "2048", "--tokens", "1e9",
        "--json",
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    for key in ("step_time_s", "mfu", "tokens_per_s", "peak_memory_per_gpu_bytes", "fits",
                "breakdown", "memory_bytes", "budget"):  # fmt: skip
        assert key in doc
    assert doc["strategy"]["dp"] == 4
    assert abs(sum(i["time_s"] for i in doc["breakdown"]) - doc["step_time_s"]) < 1e-9
    assert doc["budget"]["energy_kwh"] > 0


def test_train_prints_a_table_for_people(capsys):
    code, out, _ = run(capsys, "train", "--model", "llama3-8b", "--gpus", "8", "--tp", "8",
                       "--global-batch", "8", "--seq", "2048")  # fmt: skip
    assert code == 0 and "step time" in out and "MFU" in out and "activations" in out


def test_an_invalid_layout_is_one_line_and_exit_code_2(capsys):
    code, out, err = run(capsys, "train", "--model", "llama3-70b", "--gpus", "24", "--tp", "3")
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0
    assert "tp=3 does not divide n_heads=64; valid tp: 1, 2, 4, 8" in err


def test_degrees_that_do_not_tile_the_gpus_are_an_error(capsys):
    code, _, err = run(capsys, "train", "--model", "llama3-8b", "--gpus", "16", "--tp", "8",
                       "--dp", "4")  # fmt: skip
    assert code == 2 and "is not the world size gpus=16" in err


def test_search_train_json_reports_speed_top_and_pareto(capsys):
    code, out, err = run(
        capsys, "search", "train", "--model", "llama2-7b", "--gpu", "h100-sxm", "--gpus", "16",
        "--global-batch", "32", "--seq", "2048", "--top", "3", "--json",
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    assert doc["evaluated"] > doc["fitting"] > 0 and doc["timing"]["strategies_per_s"] > 0
    assert len(doc["top"]) == 3 and doc["pareto"] and doc["fastest"]["step_time_s"] > 0
    assert abs(doc["top"][0]["step_time_s"] / doc["fastest"]["step_time_s"] - 1) < 1e-9


def test_search_train_prints_how_many_per_second(capsys):
    code, out, _ = run(capsys, "search", "train", "--model", "llama2-7b", "--gpus", "8",
                       "--global-batch", "8", "--seq", "1024", "--top", "2")  # fmt: skip
    assert code == 0 and "strategies/s" in out and "Pareto front" in out


def test_search_without_a_subcommand_lists_it(capsys):
    code, _, err = run(capsys, "search")
    assert code == 2 and "train" in err


def test_reproduce_prints_the_comparison_and_the_medians(capsys):
    code, out, _ = run(capsys, "train", "--reproduce", "--json")
    assert code == 0
    doc = json.loads(out)
    assert len(doc["rows"]) > 40 and any(r["group"] == "time" for r in doc["summary"])
