"""Calibration on one's own records: a folder in, a fit file out (only where --out says), and
--calibration FILE pricing with it; the runs the repository's own fit reads (data/runs.json)."""

import hashlib
import json
import statistics
from pathlib import Path

import pytest

from gpuplan.cli import main
from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.efficiency import (
    calibrated_efficiency,
    efficiency_from_file,
    prior_efficiency,
)
from gpuplan.validate import calibrate, runs
from gpuplan.validate.calibration_stages import with_values
from gpuplan.validate.record_prediction import predict_record
from gpuplan.validate.records import Record

ROOT = Path(__file__).parents[1]
COMMITTED_FIT = ROOT / "gpuplan" / "hwmodels" / "data" / "calibration_h200.json"
# the synthetic GPU: GEMMs at 40% of the bf16 peak (the committed fit says about 79%)
TRUTH = with_values(prior_efficiency(), {"gemm_peak_fraction.bf16": 0.4})
SHAPES = [(m, n, k) for m in (1, 256, 4096) for n in (1024, 8192) for k in (1024, 4096)]


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _line(m, n, k, device="h200"):
    params = {"m": m, "n": n, "k": k, "dtype": "bf16"}
    rec = Record(kind="gemm", device="h200", params=params, measured={"time_s": 1.0})
    time_s = predict_record(rec, eff=TRUTH)["time_s"]
    return json.dumps({"kind": "gemm", "device": device, "params": params,
                       "measured": {"time_s": time_s}, "source": "synthetic"})  # fmt: skip


def _records(folder: Path, lines: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "gemm.jsonl").write_text("\n".join(lines) + "\n")
    return folder


@pytest.fixture(scope="module")
def fit_file(tmp_path_factory):
    """A fit made by the command line from a small folder of synthetic records."""
    root = tmp_path_factory.mktemp("user")
    _records(root / "gpu0", [_line(*s) for s in SHAPES])
    out = root / "fit.json"
    assert main(["validate", "calibrate", "--data", str(root), "--device", "h200",
                 "--out", str(out), "--json"]) == 0  # fmt: skip
    return out


def test_a_fit_from_a_folder_of_records_recovers_its_gemm_rate(fit_file):
    eff = efficiency_from_file(fit_file, "h200")
    assert eff.gemm_fraction("bf16") == pytest.approx(0.4, rel=0.03)
    assert "fit.json" in eff.source


def test_a_users_fit_changes_the_prices_and_the_output_names_it(fit_file, capsys):
    argv = ("estimate", "train-step", "--model", "llama3.2-3b", "--json")
    _, built_in, _ = run(capsys, *argv)
    code, mine, _ = run(capsys, *argv, "--calibration", str(fit_file))
    built_in, mine = json.loads(built_in), json.loads(mine)
    assert code == 0 and mine["time_s"] > 1.2 * built_in["time_s"]  # half the GEMM rate
    assert "fit.json" in mine["efficiency_source"]
    assert "fit.json" not in built_in["efficiency_source"]


def test_serve_edge_and_train_price_with_the_fit_they_are_given(fit_file, capsys):
    edge = ("serve", "edge", "--model", "llama3-8b", "--gpu", "h200", "--batch", "8",
            "--weight-dtype", "bf16", "--context", "256", "--json")  # fmt: skip
    before = json.loads(run(capsys, *edge)[1])
    after = json.loads(run(capsys, *edge, "--calibration", str(fit_file))[1])
    assert after["rows"][0]["ttft_s"] > before["rows"][0]["ttft_s"]
    assert "fit.json" in after["efficiency_source"]
    train = ("train", "--model", "llama3-8b", "--gpus", "8", "--tp", "2", "--json")
    doc = json.loads(run(capsys, *train, "--calibration", str(fit_file))[1])
    assert "fit.json" in doc["efficiency_source"]


def test_a_fit_for_another_device_is_refused_naming_both(fit_file, capsys):
    code, out, err = run(capsys, "estimate", "train-step", "--model", "llama3-8b",
                         "--gpu", "h100-sxm", "--calibration", str(fit_file))  # fmt: skip
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert "'h200'" in err and "'h100-sxm'" in err


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "no 'parameters'"),
        ('{"parameters": {}, "provenance": {}}', "names no device"),
        ('{"parameters": {"gemm_peak_fractoin": 0.5}, "provenance": {"device": "h200"}}',
         "did you mean gemm_peak_fraction"),
        ('{"parameters": {"hbm_fraction": 1.5}, "provenance": {"device": "h200"}}', "(0, 1]"),
        ('{"parameters": {"kernel_overhead_s": "3e-6"}, "provenance": {"device": "h200"}}',
         "a finite number"),
    ],
)  # fmt: skip
def test_a_malformed_fit_file_is_one_line(tmp_path, capsys, text, reason):
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    with pytest.raises(GpuplanError, match=reason.replace("(", r"\(").replace("]", r"\]")):
        efficiency_from_file(bad, "h200")
    code, _, err = run(capsys, "serve", "edge", "--model", "llama3-8b", "--gpu", "h200",
                       "--calibration", str(bad))  # fmt: skip
    assert code == 2 and len(err.strip().splitlines()) == 1


def test_the_committed_fit_read_as_a_file_prices_as_the_built_in_one():
    from_file = efficiency_from_file(COMMITTED_FIT, "h200")
    built_in = calibrated_efficiency("h200")
    assert from_file.to_dict() | {"source": "", "provenance": {}} == built_in.to_dict() | {
        "source": "",
        "provenance": {},
    }


def test_calibrate_without_out_writes_nothing(tmp_path, capsys, monkeypatch):
    _records(tmp_path / "data" / "run", [_line(*s) for s in SHAPES[:6]])
    monkeypatch.chdir(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    committed = hashlib.sha256(COMMITTED_FIT.read_bytes()).hexdigest()
    code, out, _ = run(capsys, "validate", "calibrate", "--data", "data")
    assert code == 0 and "not written" in out
    assert sorted(tmp_path.rglob("*")) == before
    assert hashlib.sha256(COMMITTED_FIT.read_bytes()).hexdigest() == committed


@pytest.mark.parametrize("out", ["", "  ", "missing/fit.json", "."])
def test_calibrate_refuses_an_out_it_cannot_write_before_any_work(tmp_path, capsys, out):
    _records(tmp_path / "run", [_line(*s) for s in SHAPES[:4]])
    code, _, err = run(capsys, "validate", "calibrate", "--data", str(tmp_path), "--out", out)
    assert code == 2 and "--out" in err and len(err.strip().splitlines()) == 1


def test_bad_lines_fail_the_calibration_and_write_nothing(tmp_path, capsys):
    _records(tmp_path / "run", [_line(*s) for s in SHAPES[:4]] + ['{"kind": "gemm"}'])
    out = tmp_path / "fit.json"
    code, _, err = run(capsys, "validate", "calibrate", "--data", str(tmp_path), "--out", str(out))
    assert code == 2 and "gemm.jsonl:5" in err and not out.exists()


def test_a_folder_of_no_valid_record_fails(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("no records here\n")
    code, _, err = run(capsys, "validate", "calibrate", "--data", str(tmp_path), "--out",
                       str(tmp_path / "fit.json"))  # fmt: skip
    assert code == 2 and "no h200 measurement record" in err
    assert not (tmp_path / "fit.json").exists()


def test_records_of_another_device_are_skipped_with_a_note(tmp_path, capsys):
    _records(tmp_path / "a", [_line(*s) for s in SHAPES[:6]])
    _records(tmp_path / "b", [_line(*s, device="l4") for s in SHAPES[:3]])
    found = calibrate.load_runs(tmp_path, "h200")
    assert {r.device for r in found.records} == {"h200"} and len(found.records) == 6
    assert found.skipped and "l4" in found.skipped[0]
    code, _, err = run(capsys, "validate", "calibrate", "--data", str(tmp_path), "--device", "l4")
    assert code == 0 and "skipped" in err and "h200" in err


def test_an_unknown_device_key_is_one_line(tmp_path, capsys):
    _records(tmp_path / "a", [_line(*s) for s in SHAPES[:3]])
    code, _, err = run(capsys, "validate", "calibrate", "--data", str(tmp_path), "--device", "h2000")
    assert code == 2 and "did you mean" in err


def test_without_data_or_a_checkout_validate_says_so_in_one_line(capsys, monkeypatch):
    monkeypatch.setattr(runs, "checkout_data_dir", lambda: None)
    for argv in (("validate", "calibrate"), ("validate", "report", "--json")):
        code, _, err = run(capsys, *argv)
        assert code == 2 and "--data DIR" in err and len(err.strip().splitlines()) == 1


def test_report_writes_into_a_folder_of_the_cwd_by_default_never_docs(tmp_path, capsys):
    from gpuplan.cli import build_parser

    args = build_parser().parse_args(["validate", "report"])
    assert args.out == "validation-report"
    code, _, err = run(capsys, "validate", "report", "--out", str(tmp_path / "no" / "such"))
    assert code == 2 and "does not exist" in err and not (tmp_path / "no").exists()


def test_the_manifests_order_does_not_change_the_records_or_their_split(tmp_path):
    _records(tmp_path / "b", [_line(*s) for s in SHAPES[:6]])
    _records(tmp_path / "a", [_line(*s) for s in SHAPES[6:]])
    loads = []
    for order in (("a", "b"), ("b", "a")):
        entries = [{"folder": f, "device": "h200", "host": "reference" if f == "a" else "fitted"}
                   for f in order]  # fmt: skip
        (tmp_path / "runs.json").write_text(json.dumps({"runs": entries}))
        found = calibrate.load_runs(tmp_path, "h200")
        train, _ = calibrate.split(found.records, seed=1, train_fraction=0.5)
        loads.append(([r.source for r in found.records], [r.source for r in train]))
    assert loads[0] == loads[1] and loads[0][0][0].startswith("a/")


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ({"folder": "a", "device": "h200", "host": "reference", "hots": 1}, "did you mean host"),
        ({"folder": "zz", "device": "h200", "host": "reference"}, "does not exist"),
        ({"folder": "a", "device": "h2000", "host": "reference"}, "unknown device"),
        ({"folder": "a", "device": "h200", "host": "fitted"}, "exactly one must"),
        ({"folder": "a", "device": "h200", "host": "reference",
          "timing": {"gemm": {"convention": "device"}}}, "needs the GPU's spin"),
    ],
)  # fmt: skip
def test_a_bad_manifest_entry_is_one_line(tmp_path, entry, reason):
    _records(tmp_path / "a", [_line(*s) for s in SHAPES[:2]])
    (tmp_path / "runs.json").write_text(json.dumps({"runs": [entry]}))
    with pytest.raises(GpuplanError, match=reason):
        calibrate.load_runs(tmp_path, "h200")


# --- the repository's own runs -----------------------------------------------------------------

DATA = ROOT / "data"
MANIFEST = json.loads((DATA / "runs.json").read_text())
DEVICES = ["h200", "h100-sxm"]  # the devices of the manifest's runs


def _h200_runs():
    """The manifest's runs the H200 calibration reads (those of device h200)."""
    return [r for r in runs.runs_of(DATA, DEVICES) if r.device == "h200"]


def test_the_manifest_names_the_runs_the_fit_was_made_from():
    committed = json.loads(COMMITTED_FIT.read_text())["provenance"]["files"]
    listed = _h200_runs()
    assert sorted({f.split("/")[0] for f in committed}) == sorted(r.name for r in listed)
    assert sorted(committed) == sorted(f"{r.name}/{p.name}" for r in listed for p in r.files)


def test_the_manifest_timing_is_what_each_runs_harness_wrote():
    for run_ in runs.runs_of(DATA, DEVICES):
        written = DATA / run_.name / "timing.json"
        notes = json.loads(written.read_text()) if written.is_file() else {}
        assert set(run_.timing) == set(notes), run_.name
        for kind, note in notes.items():
            assert run_.timing[kind].prespin_s == note["prespin_s"]
            assert run_.timing[kind].attention_kernel == note.get("kernel", "")


def test_the_manifest_host_probe_is_the_median_of_its_records():
    for run_ in runs.runs_of(DATA, DEVICES):
        probes = [s / 64 for p in run_.files for line in p.read_text().splitlines() if line
                  for s in json.loads(line).get("stats", {}).get("host_probe_s", [])]  # fmt: skip
        expected = statistics.median(probes) if probes else None
        assert run_.host_probe_s_per_launch == expected, run_.name


def test_the_manifest_hosts_are_as_the_fit_has_them():
    factors = json.loads(COMMITTED_FIT.read_text())["parameters"]["host_factor"]
    listed = _h200_runs()
    assert sorted(r.name for r in listed if r.host == "fitted") == sorted(factors)
    assert [r.name for r in listed if r.host == "reference"] == ["h200"]


@pytest.mark.slow  # builds a 1,024-GPU scenario before the fit is checked against its GPU
def test_cluster_refuses_a_fit_for_another_gpu_than_its_scenarios(fit_file, capsys):
    code, _, err = run(capsys, "cluster", "thousand-gpu", "--calibration", str(fit_file))
    assert code == 2 and "'h200'" in err and "'h100-sxm'" in err
