"""``gpuplan validate report``: held-out scores, the repeatability floor, the written report."""

import pandas as pd
import pytest

from gpuplan.validate import report


@pytest.fixture(scope="module")
def scores():
    return report.held_out_scores()


def test_the_report_scores_only_records_never_used_in_fitting(scores):
    assert scores["n_test"] + scores["n_train"] == scores["n_records"]
    assert 0 < scores["n_test"] < scores["n_train"]
    assert len(scores["rows"]) >= scores["n_test"]  # a row per record and metric
    kinds = set(scores["calibrated"]["kind"])
    assert {"gemm", "attention", "elementwise", "layer", "train_step", "decode_step"} <= kinds


def test_the_calibration_beats_a_datasheet_roofline_on_every_kind(scores):
    table = report._comparison(scores).set_index(["kind", "metric"])
    times = table.xs("time_s", level="metric")
    assert (times["median_abs_pct_error"] < times["datasheet_median_pct_error"]).all()


def test_a_datasheet_roofline_has_no_fixed_costs_and_full_rates():
    eff = report.datasheet_roofline()
    assert eff.kernel_overhead_s == 0 and eff.host_launch_s == 0
    assert eff.gemm_fraction("bf16") == 1.0 and eff.hbm_fraction == 1.0


def test_repeatability_compares_the_same_cases_on_two_gpus():
    noise = report.repeatability()
    assert isinstance(noise, pd.DataFrame) and set(noise["kind"]) == {
        "gemm",
        "attention",
        "elementwise",
    }
    assert (noise["p90_abs_pct_difference"] >= noise["median_abs_pct_difference"]).all()


def test_the_report_is_written_with_its_table_and_one_plot_per_kind(tmp_path):
    path = report.write_report(tmp_path)
    text = path.read_text()
    assert "median_abs_pct_error" in text and "How repeatable" in text
    assert len(list((tmp_path / "img").glob("validation_*.png"))) >= 8
