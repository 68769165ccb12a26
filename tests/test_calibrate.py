"""The fitter: split, staged least squares, and the document it writes (on synthetic data)."""

import json
from types import SimpleNamespace

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.efficiency import prior_efficiency
from gpuplan.validate import calibrate
from gpuplan.validate.calibration_stages import with_values
from gpuplan.validate.record_prediction import predict_record
from gpuplan.validate.records import Record

PRIOR = prior_efficiency()
TRUTH = with_values(
    PRIOR,
    {"gemm_peak_fraction.bf16": 0.6, "kernel_overhead_s": 5e-6, "collective_bw_fraction": 0.5},
)


def _gemm(m, n, k):
    return Record(
        kind="gemm",
        device="h200",
        params={"m": m, "n": n, "k": k, "dtype": "bf16"},
        measured={"time_s": 1.0},
    )


def _collective(nbytes):
    return Record(
        kind="collective",
        device="h200",
        params={"op": "all_reduce", "world": 2, "bytes": nbytes, "dtype": "bf16"},
        measured={"time_s": 1.0},
    )


def _measured_by(eff, records):
    return [
        Record(
            kind=r.kind,
            device=r.device,
            params=r.params,
            line_no=i + 1,
            measured={"time_s": predict_record(r, eff=eff)["time_s"]},
        )
        for i, r in enumerate(records)
    ]


SHAPES = [(m, n, k) for m in (1, 64, 1024, 8192) for n in (1024, 8192) for k in (512, 4096)]
RECORDS = _measured_by(
    TRUTH, [_gemm(*s) for s in SHAPES] + [_collective(2**p) for p in range(12, 31, 2)]
)


def test_the_fit_recovers_the_parameters_that_made_the_data():
    fitted = calibrate.fit(RECORDS)
    assert fitted.gemm_fraction("bf16") == pytest.approx(0.6, rel=0.02)
    assert fitted.collective_bw_fraction == pytest.approx(0.5, rel=0.02)
    assert calibrate.score(RECORDS, fitted).summary["median_abs_pct_error"].max() < 1.0


def test_the_split_is_seeded_stratified_and_disjoint():
    train, test = calibrate.split(RECORDS, seed=3, train_fraction=0.7)
    again, _ = calibrate.split(RECORDS, seed=3, train_fraction=0.7)
    assert [r.line_no for r in train] == [r.line_no for r in again]
    assert not {r.line_no for r in train} & {r.line_no for r in test}
    assert {r.kind for r in train} == {r.kind for r in test} == {"gemm", "collective"}
    assert len(train) + len(test) == len(RECORDS)


def test_a_kinds_split_does_not_move_when_another_kind_gets_records():
    gemms = [r for r in RECORDS if r.kind == "gemm"]
    alone, _ = calibrate.split(gemms, seed=3, train_fraction=0.7)
    mixed, _ = calibrate.split(RECORDS, seed=3, train_fraction=0.7)
    assert [r.line_no for r in alone] == [r.line_no for r in mixed if r.kind == "gemm"]


def test_a_case_measured_in_two_runs_falls_on_one_side():
    twice = RECORDS + [
        Record(kind=r.kind, device=r.device, params=r.params, measured=r.measured,
               source=f"h200_run2/{r.kind}.jsonl:{r.line_no}", line_no=r.line_no + 1000)
        for r in RECORDS
    ]  # fmt: skip
    train, test = calibrate.split(twice, seed=3, train_fraction=0.7)
    key = lambda r: (r.kind, json.dumps(r.params, sort_keys=True))  # noqa: E731
    assert not {key(r) for r in train} & {key(r) for r in test}


def test_setting_a_parameter_copies_instead_of_mutating():
    changed = with_values(PRIOR, {"gemm_peak_fraction.fp8": 0.1})
    assert PRIOR.gemm_fraction("fp8") != 0.1 and changed.gemm_fraction("fp8") == 0.1


def test_calibrate_writes_its_fit_with_provenance(tmp_path, capsys):
    folder = tmp_path / "h200-synthetic"
    folder.mkdir()
    lines = [
        json.dumps(
            {
                "kind": r.kind,
                "device": r.device,
                "params": r.params,
                "measured": r.measured,
                "source": "synthetic",
            }
        )
        for r in RECORDS
    ]
    (folder / "records.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "fit.json"
    args = SimpleNamespace(data=str(tmp_path), seed=0, train_fraction=0.7, out=str(out), json=False)
    assert calibrate.main(args) == 0
    doc = json.loads(out.read_text())
    assert doc["provenance"]["seed"] == 0 and doc["provenance"]["files"]
    assert "gemm_peak_fraction" in doc["parameters"]
    assert "held out" in capsys.readouterr().out


def test_a_folder_without_measurements_is_a_clear_error(tmp_path):
    with pytest.raises(GpuplanError, match="no h200 measurement record"):
        calibrate.load_measurements(tmp_path)
