"""The pipeline measurement script on two CPU processes (gloo), and the timeline's prediction of
its records."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.sim.timeline.validation import pipeline_errors, predict_pipeline_step

ROOT = Path(__file__).resolve().parents[1]
CASE = {"hidden": 2048, "heads_q": 16, "heads_kv": 8, "ffn": 8192, "layers": 8, "vocab": 32000,
        "seq": 2048, "micro_batch": 1, "micro_batches": 4, "schedule": "1f1b", "stages": 2,
        "dtype": "bf16"}  # fmt: skip


def test_the_tiny_cpu_run_writes_contract_style_pipeline_records(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("torch.distributed.pipelining")
    cmd = [sys.executable, "-m", "gpuplan.validate.pipeline_bench", "--tiny", "--device", "cpu",
           "--out", str(tmp_path)]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    records = [json.loads(x) for x in (tmp_path / "pipeline.jsonl").read_text().splitlines()]
    assert {r["params"]["schedule"] for r in records} == {"gpipe", "1f1b"}
    for r in records:
        assert r["kind"] == "pipeline_step" and r["measured"]["time_s"] > 0 and r["source"]
        assert r["params"]["stages"] == 2
    assert (tmp_path / "environment_pipeline.json").exists()


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
