"""The command line: exit codes, JSON shape, help, one-line errors, tables for people."""

import json
import sys
import types
from pathlib import Path

import pandas as pd
import pytest

import gpuplan
import gpuplan.cli
from gpuplan.cli import main
from gpuplan.errors import GpuplanError
from gpuplan.tables import (
    dump_json,
    format_bytes,
    format_bytes_per_s,
    format_count,
    format_flops_per_s,
    format_seconds,
    format_value,
    render_table,
)

ROOT = Path(__file__).parents[1]
SAMPLE = str(ROOT / "data" / "sample.jsonl")
BAD = str(ROOT / "tests" / "data" / "bad_records.jsonl")


def run(capsys, *argv):
    """(exit code, stdout, stderr) of ``gpuplan argv``."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def fake_module(monkeypatch, name, **attrs):
    """Put a stand-in module under ``name`` in sys.modules for this test."""
    module = types.ModuleType(name)
    for key, value in attrs.items():
        setattr(module, key, value)
    monkeypatch.setitem(sys.modules, name, module)
    return module


def fake_accelerator(key, **over):
    fields = {
        "key": key,
        "name": f"Test {key}",
        "peak_flops_per_s": {"bf16": 9.894e14, "fp8": 1.9789e15},
        "hbm_bytes": 141e9,
        "hbm_bytes_per_s": 4.8e12,
        "l2_bytes": 50e6,
        "scaleup_bytes_per_s": 450e9,
        "tdp_w": 700.0,
    }
    return types.SimpleNamespace(**(fields | over))


@pytest.fixture
def catalogue(monkeypatch):
    """A two-device stand-in catalogue: h200 and h100-sxm."""
    accs = [fake_accelerator("h200"), fake_accelerator("h100-sxm", peak_flops_per_s={})]
    return fake_module(monkeypatch, "gpuplan.hwmodels.accelerators", list_accelerators=lambda: accs)


@pytest.fixture
def predictor(monkeypatch, catalogue):
    """A stand-in predictor ten percent above every measured time, and 2 GB of memory."""

    def predict_record(record):
        return {"time_s": 1.1 * record.measured["time_s"], "peak_bytes": 2e9}

    def predict_breakdown(kind, device, params):
        from gpuplan.sim.estimate.breakdown import Breakdown, Item

        item = Item(layer="model", category="gemm", op="gemm", phase="fwd", time_s=1e-3, kernels=1)
        return Breakdown(items=(item,))

    return fake_module(
        monkeypatch,
        "gpuplan.validate.record_prediction",
        predict_record=predict_record,
        predict_breakdown=predict_breakdown,
    )


def assert_one_line_error(err: str, code: int, *, expected: int = 2) -> None:
    assert code == expected
    assert "Traceback" not in err
    assert err.startswith("gpuplan: error: ")
    assert err.count("\n") == 1


# --- the framework ------------------------------------------------------------------------


def test_version_prints_the_package_version(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.strip() == f"gpuplan {gpuplan.__version__}"


def test_no_command_is_a_one_line_error_listing_the_commands(capsys):
    code, _, err = run(capsys)
    assert_one_line_error(err, code)
    assert "choose a command: models, gpus, stacks, validate" in err


def test_an_unknown_command_is_a_one_line_error(capsys):
    code, _, err = run(capsys, "simulate")
    assert_one_line_error(err, code)
    assert "invalid choice: 'simulate'" in err and "usage:" not in err


def test_validate_without_a_command_lists_its_commands(capsys):
    code, _, err = run(capsys, "validate")
    assert_one_line_error(err, code)
    assert "score, calibrate, trace" in err


def _all_commands():
    parser = gpuplan.cli.build_parser()
    groups = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    commands = [[name] for name in groups[0].choices]
    return commands + [["validate", name] for name in ("score", "calibrate", "trace")]


@pytest.mark.parametrize("command", [[]] + _all_commands(), ids=" ".join)
def test_help_works_for_every_command(capsys, command):
    code, out, err = run(capsys, *command, "--help")
    assert code == 0 and err == ""
    assert out.startswith(f"usage: gpuplan {' '.join(command)}".rstrip())


@pytest.mark.parametrize("command", _all_commands(), ids=" ".join)
def test_every_command_takes_json_and_debug(command):
    parser = gpuplan.cli.build_parser()
    for name in command:
        sub = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
        parser = sub[0].choices[name]
    if any(a.__class__.__name__ == "_SubParsersAction" for a in parser._actions):
        return  # a group: its commands carry the options
    flags = {s for a in parser._actions for s in a.option_strings}
    assert {"--json", "--debug"} <= flags


def test_a_missing_optional_command_is_left_out_silently(capsys, monkeypatch):
    monkeypatch.setattr(gpuplan.cli, "OPTIONAL_COMMAND_MODULES", ("gpuplan.cli.no_such_cmd",))
    code, out, err = run(capsys, "--help")
    assert code == 0 and err == "" and "models" in out


def test_a_broken_optional_command_is_a_warning_not_a_crash(capsys, monkeypatch):
    def register(subparsers):
        raise RuntimeError("half written")

    fake_module(monkeypatch, "gpuplan.cli.broken_cmd", register=register)
    monkeypatch.setattr(gpuplan.cli, "OPTIONAL_COMMAND_MODULES", ("gpuplan.cli.broken_cmd",))
    code, _, err = run(capsys, "--version")
    assert code == 0 and "warning: gpuplan.cli.broken_cmd left out" in err


def test_an_internal_error_exits_3_without_a_traceback_unless_debug(capsys, monkeypatch, catalogue):
    def predict_record(record):
        raise RuntimeError("bug in the model")

    fake_module(monkeypatch, "gpuplan.validate.record_prediction", predict_record=predict_record)
    code, _, err = run(capsys, "validate", "score", SAMPLE)
    assert code == 3 and "Traceback" not in err
    assert "internal error: RuntimeError: bug in the model (run with --debug" in err
    code, _, err = run(capsys, "validate", "score", SAMPLE, "--debug")
    assert code == 3 and "Traceback" in err
    code, _, err = run(capsys, "--debug", "validate", "score", SAMPLE)
    assert code == 3 and "Traceback" in err


# --- validate score -----------------------------------------------------------------------


def test_score_json_is_one_document_with_the_contract_shape(capsys, predictor):
    code, out, err = run(capsys, "validate", "score", SAMPLE, "--json")
    # the sample's records say they are illustrative: scored, with a note that they are not
    # measurements
    assert code == 0 and err.startswith("gpuplan: note: 15 of 15 records") and "illustrative" in err
    doc = json.loads(out)
    assert list(doc) == ["rows", "summary", "errors"]
    assert len(doc["rows"]) == 17  # 15 times, 2 peak memories
    for row in doc["rows"]:
        assert {"kind", "metric", "measured", "predicted", "abs_pct_error"} <= set(row)
    times = [r for r in doc["rows"] if r["metric"] == "time_s"]
    assert all(r["abs_pct_error"] == pytest.approx(10.0) for r in times)
    assert set(doc["summary"][0]) == {
        "kind",
        "metric",
        "n",
        "median_abs_pct_error",
        "p90_abs_pct_error",
    }
    assert doc["errors"] == []


def test_score_tables_show_rows_and_summary_in_readable_units(capsys, predictor):
    code, out, _ = run(capsys, "validate", "score", SAMPLE, "--rows", "3")
    assert code == 0
    assert "545 µs" in out and "600 µs" in out  # measured and 1.1 x measured
    assert "... and 14 more rows" in out
    assert "median |error|" in out and "10.0%" in out


def test_bad_lines_go_to_stderr_with_line_numbers_and_the_rest_is_scored(capsys, predictor):
    code, out, err = run(capsys, "validate", "score", BAD, "--json")
    assert code == 0
    doc = json.loads(out)
    assert [r["line"] for r in doc["rows"]] == [1, 11]
    assert [e["line"] for e in doc["errors"]] == [2, 3, 5, 6, 7, 8, 9, 10]
    assert f"{BAD}:5: params.k is missing" in err
    assert f"{BAD}:8: unknown device 'h300'" in err


@pytest.mark.parametrize(("limit", "expected"), [("5", 1), ("15", 0), ("10.5", 0)])
def test_max_median_error_fails_only_above_the_limit(capsys, predictor, tmp_path, limit, expected):
    # times are 10% off; the peak_bytes errors are far larger, so only time kinds are used
    times = Path(SAMPLE).read_text().splitlines()[:7]
    path = tmp_path / "times.jsonl"
    path.write_text("\n".join(times))
    code, out, err = run(
        capsys, "validate", "score", str(path), "--max-median-error", limit, "--json"
    )
    assert code == expected
    json.loads(out)  # still one document on stdout
    assert ("median error above" in err) == (expected == 1)


def test_the_limit_must_be_a_number(capsys, predictor):
    code, _, err = run(capsys, "validate", "score", SAMPLE, "--max-median-error", "ten")
    assert_one_line_error(err, code)
    assert "'ten' is not a number" in err


def test_a_missing_records_file_exits_2(capsys, predictor, tmp_path):
    code, _, err = run(capsys, "validate", "score", str(tmp_path / "none.jsonl"))
    assert_one_line_error(err, code)
    assert "does not exist" in err


def test_an_empty_records_file_exits_2(capsys, predictor, tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n")
    code, _, err = run(capsys, "validate", "score", str(tmp_path / "empty.jsonl"))
    assert_one_line_error(err, code)
    assert "is empty" in err


def test_a_file_of_bad_lines_only_exits_2_after_listing_them(capsys, predictor, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("{not json}\n[1]\n")
    code, _, err = run(capsys, "validate", "score", str(path))
    assert code == 2 and "Traceback" not in err
    assert ":1: not valid JSON" in err and ":2: a record must be a JSON object" in err
    assert "gpuplan: error: no record of" in err


def test_a_prediction_error_is_reported_for_its_line(capsys, monkeypatch, catalogue):
    def predict_record(record):
        if record.kind == "gemm":
            raise GpuplanError("gemm: not on this device")
        return {"time_s": record.measured["time_s"]}

    fake_module(monkeypatch, "gpuplan.validate.record_prediction", predict_record=predict_record)
    code, out, err = run(capsys, "validate", "score", SAMPLE, "--json")
    assert code == 0
    assert [e["line"] for e in json.loads(out)["errors"]] == [1, 2, 3]
    assert ":1: cannot predict: gemm: not on this device" in err


def test_score_with_the_real_predictor_and_catalogue_runs(capsys):
    pytest.importorskip("gpuplan.validate.record_prediction")
    pytest.importorskip("gpuplan.hwmodels.accelerators")
    code, out, _ = run(capsys, "validate", "score", SAMPLE, "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["rows"] and all(r["predicted"] > 0 for r in doc["rows"])


# --- validate calibrate and trace ---------------------------------------------------------


def test_calibrate_hands_its_options_to_the_calibration(capsys, monkeypatch):
    seen = {}

    def calibrate_main(args):
        seen.update(vars(args))
        print(dump_json({"fitted": 1}) if args.json else "fitted")
        return 0

    fake_module(monkeypatch, "gpuplan.validate.calibrate", main=calibrate_main)
    argv = ("validate", "calibrate", "--data", "d", "--seed", "3", "--train-fraction", "0.5")
    code, out, _ = run(capsys, *argv, "--out", "o.json", "--json")
    assert code == 0 and json.loads(out) == {"fitted": 1}
    assert (seen["data"], seen["seed"], seen["train_fraction"], seen["out"]) == (
        "d",
        3,
        0.5,
        "o.json",
    )


def test_calibrate_defaults(capsys, monkeypatch):
    seen = {}
    fake_module(
        monkeypatch, "gpuplan.validate.calibrate", main=lambda args: seen.update(vars(args))
    )
    assert run(capsys, "validate", "calibrate")[0] == 0
    assert (seen["data"], seen["seed"], seen["train_fraction"], seen["json"]) == (
        None,
        0,
        0.7,
        False,
    )


@pytest.mark.parametrize("fraction", ["1.5", "0", "x"])
def test_a_train_fraction_outside_0_1_exits_2(capsys, fraction):
    code, _, err = run(capsys, "validate", "calibrate", "--train-fraction", fraction)
    assert_one_line_error(err, code)
    assert "--train-fraction" in err


@pytest.fixture
def traces(monkeypatch, tmp_path):
    """A stand-in trace reader, and a trace file for it to 'read'."""
    table = pd.DataFrame(
        {"count": [4, 2], "total_s": [3e-3, 1e-3], "share": [0.75, 0.25]},
        index=pd.Index(["gemm", "norm"], name="class"),
    )
    fake_module(monkeypatch, "gpuplan.validate.trace", kernel_table=lambda path, **kw: table)
    path = tmp_path / "trace.json"
    path.write_text("{}")
    return str(path)


def test_trace_lists_kernel_time_by_class(capsys, traces):
    code, out, _ = run(capsys, "validate", "trace", traces, "--json")
    assert code == 0
    assert json.loads(out)["kernels"] == [
        {"class": "gemm", "count": 4, "total_s": 3e-3, "share": 0.75},
        {"class": "norm", "count": 2, "total_s": 1e-3, "share": 0.25},
    ]
    code, out, _ = run(capsys, "validate", "trace", traces)
    assert code == 0 and "3 ms" in out and "gemm" in out


def test_trace_with_a_record_shows_its_prediction(capsys, traces, predictor):
    record = Path(SAMPLE).read_text().splitlines()[0]
    code, out, _ = run(capsys, "validate", "trace", traces, "--record", record, "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["record"]["params"]["n"] == 11008
    assert doc["predicted"]["time_s"] == pytest.approx(1.1 * doc["measured"]["time_s"])
    gemm = next(row for row in doc["comparison"] if row["class"] == "gemm")
    assert doc["iterations"] == 4 and gemm["measured_s"] == pytest.approx(0.75e-3)
    code, out, _ = run(capsys, "validate", "trace", traces, "--record", SAMPLE)  # a file
    assert code == 0 and "measured 545 µs, predicted 600 µs" in out


def test_trace_with_a_bad_record_exits_2(capsys, traces, predictor):
    code, _, err = run(capsys, "validate", "trace", traces, "--record", '{"kind": "gemm"}')
    assert_one_line_error(err, code)
    assert "device is missing" in err


def test_a_missing_trace_exits_2(capsys, tmp_path):
    code, _, err = run(capsys, "validate", "trace", str(tmp_path / "none.json"))
    assert_one_line_error(err, code)


# --- models and gpus ----------------------------------------------------------------------


def test_gpus_json_has_raw_si_numbers(capsys, catalogue):
    code, out, _ = run(capsys, "gpus", "--json")
    assert code == 0
    rows = json.loads(out)
    assert rows[0] == {
        "key": "h200",
        "name": "Test h200",
        "bf16_flops_per_s": 9.894e14,
        "fp8_flops_per_s": 1.9789e15,
        "fp4_flops_per_s": None,
        "hbm_bytes": 141e9,
        "hbm_bytes_per_s": 4.8e12,
        "l2_bytes": 50e6,
        "scaleup_bytes_per_s": 450e9,
        "tdp_w": 700.0,
    }
    assert rows[1]["bf16_flops_per_s"] is None


def test_gpus_table_is_in_units_people_read(capsys, catalogue):
    code, out, _ = run(capsys, "gpus")
    assert code == 0
    for text in ("989 TFLOP/s", "1979 TFLOP/s", "141 GB", "4.8 TB/s", "50 MB", "450 GB/s", "700 W"):
        assert text in out


def test_gpus_lists_the_real_catalogue(capsys):
    pytest.importorskip("gpuplan.hwmodels.accelerators")
    code, out, _ = run(capsys, "gpus", "--json")
    assert code == 0 and "h200" in [r["key"] for r in json.loads(out)]


@pytest.fixture
def presets():
    pytest.importorskip("gpuplan.workloads.presets")
    pytest.importorskip("gpuplan.workloads.memory")


def test_models_json_lists_every_preset_with_exact_counts(capsys, presets):
    code, out, _ = run(capsys, "models", "--json")
    assert code == 0
    rows = {r["key"]: r for r in json.loads(out)}
    llama = rows["llama3-8b"]
    assert llama["total_params"] == 8_030_261_248  # Meta-Llama-3-8B, exact
    assert (
        llama["kv_cache_bytes_per_token"] == 32 * 2 * 8 * 128 * 2
    )  # layers, K+V, heads, dim, bf16
    assert (llama["layers"], llama["kv_heads"], llama["experts"]) == (32, 8, None)
    assert rows["mixtral-8x7b"]["active_params"] < rows["mixtral-8x7b"]["total_params"]


def test_models_table_shows_counts_in_billions(capsys, presets):
    code, out, _ = run(capsys, "models")
    assert code == 0 and "8.03 B" in out and "131 KB" in out


def test_an_unknown_model_key_exits_2_with_the_nearest_keys(capsys, presets):
    code, _, err = run(capsys, "models", "llama3-9b")
    assert_one_line_error(err, code)
    assert "did you mean llama3-8b" in err


def test_models_reads_a_hugging_face_config(capsys, presets, tmp_path):
    config = {
        "model_type": "llama",
        "hidden_size": 256,
        "intermediate_size": 688,
        "num_hidden_layers": 2,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "vocab_size": 1000,
        "max_position_embeddings": 512,
        "tie_word_embeddings": False,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    code, out, _ = run(capsys, "models", "--hf-config", str(tmp_path), "--json")
    assert code == 0
    doc = json.loads(out)
    # embeddings + head 2*1000*256; per layer: q,o 2*256^2, k,v 2*256*64, MLP 3*256*688, 2 norms
    per_layer = 2 * 256 * 256 + 2 * 256 * 64 + 3 * 256 * 688 + 2 * 256
    assert doc["total_params"] == 2 * 1000 * 256 + 2 * per_layer + 256
    assert doc["kv_cache_bytes_per_token"] == 2 * 2 * 2 * 32 * 2
    code, out, _ = run(capsys, "models", "--hf-config", str(tmp_path / "config.json"))
    assert code == 0 and "total params" in out


def test_a_missing_hf_config_exits_2(capsys, presets, tmp_path):
    code, _, err = run(capsys, "models", "--hf-config", str(tmp_path / "nothing.json"))
    assert_one_line_error(err, code)


def test_a_key_and_an_hf_config_together_exit_2(capsys, presets, tmp_path):
    code, _, err = run(capsys, "models", "llama3-8b", "--hf-config", str(tmp_path))
    assert_one_line_error(err, code)
    assert "not both" in err


# --- tables -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "value", "text"),
    [
        (format_seconds, 1.2e-5, "12 µs"),
        (format_seconds, 0.0105, "10.5 ms"),
        (format_seconds, 2.0, "2 s"),
        (format_seconds, 3e-9, "3 ns"),
        (format_bytes, 131072, "131 KB"),
        (format_bytes, 141e9, "141 GB"),
        (format_bytes, 512, "512 B"),
        (format_bytes_per_s, 4.8e12, "4.8 TB/s"),
        (format_bytes_per_s, 450e9, "450 GB/s"),
        (format_flops_per_s, 9.894e14, "989 TFLOP/s"),
        (format_flops_per_s, 1.9789e15, "1979 TFLOP/s"),
        (format_count, 8_030_261_248, "8.03 B"),
        (format_count, 12, "12"),
    ],
)
def test_values_are_formatted_for_people(fmt, value, text):
    assert fmt(value) == text


@pytest.mark.parametrize(
    ("name", "value", "text"),
    [
        ("time_s", 5.45e-4, "545 µs"),
        ("peak_bytes", 7.2e8, "720 MB"),
        ("hbm_bytes_per_s", 3.35e12, "3.35 TB/s"),
        ("abs_pct_error", 12.345, "12.3%"),
        ("total_params", 46.7e9, "46.7 B"),
        ("tdp_w", 700.0, "700 W"),
        ("layers", 32, "32"),
        ("causal", True, "yes"),
        ("l2_bytes", None, "-"),
        ("l2_bytes", float("nan"), "-"),
        ("name", "NVIDIA H200", "NVIDIA H200"),
    ],
)
def test_the_unit_in_a_column_name_picks_the_format(name, value, text):
    assert format_value(name, value) == text


def test_a_table_aligns_numbers_right_and_text_left():
    rows = [{"key": "a", "time_s": 1e-3}, {"key": "long-key", "time_s": 0.25}]
    assert render_table(rows, headers={"time_s": "time"}).splitlines() == [
        "key         time",
        "--------  ------",
        "a           1 ms",
        "long-key  250 ms",
    ]


def test_a_dataframe_renders_like_its_rows():
    frame = pd.DataFrame({"key": ["a"], "n": [3]})
    assert render_table(frame) == render_table([{"key": "a", "n": 3}])


def test_json_has_no_nan_and_unwraps_numpy_values():
    frame = pd.DataFrame({"x": [1.0, float("nan")], "n": [1, 2]})
    assert json.loads(dump_json({"rows": frame})) == {
        "rows": [{"x": 1.0, "n": 1}, {"x": None, "n": 2}]
    }


def test_trace_kind_without_params_is_one_clear_error(capsys, traces):
    code, _, err = run(capsys, "validate", "trace", traces, "--kind", "layer")
    assert_one_line_error(err, code)
    assert "--kind and --params go together" in err


def test_a_trace_whose_iterations_cannot_be_inferred_asks_for_them(capsys, monkeypatch, tmp_path):
    table = pd.DataFrame(
        {"count": [2], "total_s": [1e-3], "share": [1.0]}, index=pd.Index(["norm"], name="class")
    )
    fake_module(monkeypatch, "gpuplan.validate.trace", kernel_table=lambda path, **kw: table)
    path = tmp_path / "trace.json"
    path.write_text("{}")
    params = '{"m": 64, "n": 64, "k": 64, "dtype": "bf16"}'
    code, _, err = run(capsys, "validate", "trace", str(path), "--kind", "gemm", "--params", params)
    assert_one_line_error(err, code)
    assert "give --iterations" in err


def test_a_report_without_a_calibration_says_how_to_make_one(capsys, monkeypatch):
    from gpuplan.validate import report

    monkeypatch.setattr(report, "calibrated_efficiency", lambda device: None)
    code, _, err = run(capsys, "validate", "report")
    assert_one_line_error(err, code)
    assert "gpuplan validate calibrate" in err
