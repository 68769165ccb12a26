"""The pipeline measurement script on two and four CPU processes (gloo), and the timeline's
prediction of its records."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.validate.timeline import pipeline_errors, predict_pipeline, predict_pipeline_step

ROOT = Path(__file__).resolve().parents[1]
CASE = {"hidden": 2048, "heads_q": 16, "heads_kv": 8, "ffn": 8192, "layers": 8, "vocab": 32000,
        "seq": 2048, "micro_batch": 1, "micro_batches": 4, "schedule": "1f1b", "stages": 2,
        "dtype": "bf16"}  # fmt: skip


def _tiny_run(tmp_path, *args: str) -> list[dict]:
    pytest.importorskip("torch")
    pytest.importorskip("torch.distributed.pipelining")
    cmd = [sys.executable, "-m", "gpuplan.validate.pipeline_bench", "--tiny", "--device", "cpu",
           "--out", str(tmp_path), *args]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    return [json.loads(x) for x in (tmp_path / "pipeline.jsonl").read_text().splitlines()]


def test_the_tiny_cpu_run_writes_contract_style_pipeline_records(tmp_path):
    records = _tiny_run(tmp_path)
    assert {r["params"]["schedule"] for r in records} == {"gpipe", "1f1b"}
    for r in records:
        assert r["kind"] == "pipeline_step" and r["measured"]["time_s"] > 0 and r["source"]
        assert r["params"]["stages"] == 2
        assert r["params"]["micro_batches"] in (2, 4)
    assert (tmp_path / "environment_pipeline.json").exists()


def test_four_stages_run_on_four_processes_with_the_bubble_of_each_step(tmp_path):
    records = _tiny_run(tmp_path, "--stages", "4", "--schedules", "1f1b")
    assert [r["params"]["micro_batches"] for r in records] == [4, 8]
    for r in records:
        assert r["params"]["stages"] == 4 and r["params"]["schedule"] == "1f1b"
        stats = r["stats"]
        assert len(stats["stage_fwd_bwd_s"]) == len(stats["rank_median_s"]) == 4
        step_s, m = r["measured"]["time_s"], r["params"]["micro_batches"]
        assert stats["bubble_s"] == pytest.approx(step_s - m * max(stats["stage_fwd_bwd_s"]))
        assert stats["bubble_fraction"] < 1
    on_h200 = [r | {"device": "h200"} for r in records]  # the CPU is not in the catalogue
    frame = pipeline_errors(on_h200)
    assert list(frame["stages"]) == [4, 4] and frame["measured_bubble"].notna().all()


def test_a_stage_count_that_splits_no_model_is_refused(tmp_path):
    pytest.importorskip("torch")
    cmd = [sys.executable, "-m", "gpuplan.validate.pipeline_bench", "--tiny", "--device", "cpu",
           "--out", str(tmp_path), "--stages", "3"]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "split evenly" in done.stderr


def test_the_bubble_shrinks_with_micro_batches_and_grows_with_stages():
    bubble = {(s, m): predict_pipeline(CASE | {"stages": s, "micro_batches": m})["bubble_fraction"]
              for s in (2, 4) for m in (4, 8)}  # fmt: skip
    assert bubble[(2, 8)] < bubble[(2, 4)] and bubble[(4, 8)] < bubble[(4, 4)]
    assert bubble[(2, 4)] < bubble[(4, 4)]
    # near (p - 1) / (m + p - 1) of balanced stages (GPipe, Huang et al. 2019); the last stage
    # carries the head, so not exactly
    assert bubble[(4, 4)] == pytest.approx(3 / 7, abs=0.1)


def test_every_stage_gets_its_share_of_the_layers():
    stage_s = predict_pipeline(CASE | {"stages": 4})["stage_fwd_bwd_s"]
    assert len(stage_s) == 4
    assert stage_s[1] == pytest.approx(stage_s[2])  # two layers each, no embedding or head
    assert stage_s[3] > stage_s[2]  # the LM head and the loss
    halves = predict_pipeline(CASE)["stage_fwd_bwd_s"]
    assert halves[0] == pytest.approx(stage_s[0] + stage_s[1], rel=0.1)


def test_more_micro_batches_take_longer_but_less_per_micro_batch():
    times = {m: predict_pipeline_step(CASE | {"micro_batches": m}) for m in (2, 4, 8)}
    assert times[2] < times[4] < times[8]
    assert times[8] / 8 < times[2] / 2  # the bubble is amortized


def test_the_error_table_has_a_row_per_record():
    measured = predict_pipeline_step(CASE) * 1.1
    rec = {"kind": "pipeline_step", "device": "h200", "params": CASE,
           "measured": {"time_s": measured}}  # fmt: skip
    frame = pipeline_errors([rec, {"kind": "gemm"}])
    assert len(frame) == 1
    assert frame["error_pct"].iloc[0] == pytest.approx(-100 / 11, rel=1e-6)


def test_a_record_missing_a_parameter_is_a_clear_error():
    bad = dict(CASE)
    del bad["micro_batches"]
    with pytest.raises(GpuplanError, match="missing parameter 'micro_batches'"):
        predict_pipeline_step(bad)
