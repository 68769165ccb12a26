"""Scoring predictions against records: exact answers with fake predictors."""

import json
from pathlib import Path

import numpy as np
import pytest

from gpuplan.errors import GpuplanError
from gpuplan.validate.records import Record, RecordError, read_records
from gpuplan.validate.score import abs_pct_error, score_records

SAMPLE = Path(__file__).parents[1] / "data" / "sample.jsonl"


def gemm(line_no: int, time_s: float, m: int = 1024) -> Record:
    return Record(
        kind="gemm",
        device="h200",
        params={"m": m, "n": 1024, "k": 1024, "dtype": "bf16"},
        measured={"time_s": time_s},
        line_no=line_no,
    )


def layer(line_no: int, time_s: float, peak_bytes: float) -> Record:
    params = {
        "hidden": 4096,
        "heads_q": 32,
        "heads_kv": 8,
        "ffn": 14336,
        "seq": 4096,
        "micro_batch": 1,
        "pass": "fwd",
        "compiled": False,
        "dtype": "bf16",
    }
    return Record(
        kind="layer",
        device="h200",
        params=params,
        measured={"time_s": time_s, "peak_bytes": peak_bytes},
        line_no=line_no,
    )


def test_abs_pct_error_is_relative_to_the_measurement():
    assert abs_pct_error(measured=2.0, predicted=3.0) == 50.0
    assert abs_pct_error(measured=2.0, predicted=1.0) == 50.0
    with pytest.raises(GpuplanError, match="measured=0"):
        abs_pct_error(measured=0, predicted=1.0)


def test_a_predictor_ten_percent_high_scores_ten_percent_everywhere():
    records, _ = read_records(SAMPLE)
    result = score_records(records, lambda r: {"time_s": 1.1 * r.measured["time_s"]})
    assert len(result.rows) == len(records)
    assert np.allclose(result.rows["abs_pct_error"], 10.0)
    assert np.allclose(result.summary["median_abs_pct_error"], 10.0)
    assert result.summary["n"].sum() == len(records)
    assert result.errors == []


def test_median_and_p90_use_linear_interpolation():
    records = [gemm(i, 1.0) for i in range(1, 6)]
    errors_pct = [0.0, 10.0, 20.0, 30.0, 40.0]  # predicted = measured * (1 + e / 100)
    result = score_records(records, lambda r: {"time_s": 1 + errors_pct[r.line_no - 1] / 100})
    [row] = result.summary.to_dict("records")
    assert row["n"] == 5
    assert row["median_abs_pct_error"] == pytest.approx(20.0)
    assert row["p90_abs_pct_error"] == pytest.approx(36.0)  # 30 + 0.6 * (40 - 30)


def test_only_metrics_both_measured_and_predicted_are_scored():
    records = [layer(1, 0.01, 1e9), gemm(2, 1e-3)]
    result = score_records(records, lambda r: {"time_s": 0.02, "peak_bytes": 1.5e9})
    assert list(zip(result.rows["kind"], result.rows["metric"], strict=True)) == [
        ("layer", "time_s"),
        ("layer", "peak_bytes"),
        ("gemm", "time_s"),
    ]
    summary = {(r["kind"], r["metric"]): r for r in result.summary.to_dict("records")}
    assert summary["layer", "peak_bytes"]["median_abs_pct_error"] == pytest.approx(50.0)
    assert summary["gemm", "time_s"]["median_abs_pct_error"] == pytest.approx(1900.0)
    # the contract's kind order, then the metric order
    assert list(result.summary["kind"]) == ["gemm", "layer", "layer"]


def test_params_are_columns_of_the_rows():
    result = score_records([gemm(1, 1e-3, m=7), layer(2, 0.01, 1e9)], lambda r: {"time_s": 1e-3})
    rows = result.rows.set_index("line")
    assert rows.loc[1, "m"] == 7 and rows.loc[2, "hidden"] == 4096
    assert rows["m"].dtype == "Int64" and rows["compiled"].dtype == "boolean"
    assert not rows.loc[2, "compiled"]


def test_a_prediction_error_is_reported_for_its_line_and_the_rest_is_scored():
    def predict(record):
        if record.line_no == 2:
            raise GpuplanError("m=1024 is too small for this test")
        if record.line_no == 3:
            raise NotImplementedError("gemm on this device")
        return {"time_s": 2e-3}

    result = score_records([gemm(1, 1e-3), gemm(2, 1e-3), gemm(3, 1e-3)], predict)
    assert list(result.rows["line"]) == [1]
    assert [(e.line_no, e.reason) for e in result.errors] == [
        (2, "cannot predict: m=1024 is too small for this test"),
        (3, "not modelled: gemm on this device"),
    ]


def test_a_bug_in_the_predictor_is_not_hidden():
    with pytest.raises(ZeroDivisionError):
        score_records([gemm(1, 1e-3)], lambda r: {"time_s": 1 / 0})


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0, "fast", None])
def test_a_prediction_that_is_not_a_number_is_an_error_for_its_line(value):
    result = score_records([gemm(4, 1e-3)], lambda r: {"time_s": value})
    assert result.rows.empty
    assert result.errors[0].line_no == 4 and "predicted time_s=" in result.errors[0].reason


def test_reading_errors_are_carried_and_sorted_by_line():
    carried = [RecordError(line_no=9, reason="bad"), RecordError(line_no=1, reason="worse")]
    result = score_records([gemm(5, 1e-3)], lambda r: {"time_s": 1e-3}, errors=carried)
    assert [e.line_no for e in result.errors] == [1, 9]


def test_to_json_has_exactly_the_contract_shape():
    records = [gemm(1, 1e-3), layer(2, 0.01, 1e9)]
    errors = [RecordError(line_no=3, reason="not valid JSON")]
    result = score_records(records, lambda r: {"time_s": 1.5e-3}, errors=errors)
    doc = json.loads(json.dumps(result.to_json(), allow_nan=False))
    assert list(doc) == ["rows", "summary", "errors"]
    row = doc["rows"][0]
    assert list(row)[:5] == ["kind", "metric", "measured", "predicted", "abs_pct_error"]
    assert row["params"] == {"m": 1024, "n": 1024, "k": 1024, "dtype": "bf16"}
    assert row["abs_pct_error"] == pytest.approx(50.0)
    assert doc["rows"][1]["params"]["compiled"] is False
    assert doc["summary"][0] == {
        "kind": "gemm",
        "metric": "time_s",
        "n": 1,
        "median_abs_pct_error": pytest.approx(50.0),
        "p90_abs_pct_error": pytest.approx(50.0),
    }
    assert doc["errors"] == [{"line": 3, "reason": "not valid JSON"}]


def test_nothing_to_score_gives_empty_tables():
    result = score_records([], lambda r: {})
    assert result.rows.empty and result.summary.empty
    assert result.to_json() == {"rows": [], "summary": [], "errors": []}
