"""The measurement harness, run at tiny sizes on the CPU (torch required; skipped without it)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuplan.validate.harness.records import (
    MEASURED_KEYS,
    PARAM_KEYS,
    device_key,
    make_record,
    read_records,
)
from gpuplan.validate.harness.timing import Budget
from gpuplan.validate.record_kinds import optional_param_rules

ROOT = Path(__file__).resolve().parents[1]
ALL_KINDS = tuple(PARAM_KEYS)


def _harness(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "gpuplan.validate.harness", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    """One --tiny --device cpu run of every kind, with traces; its output folder."""
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("harness")
    done = _harness("--out", str(out), "--tiny", "--device", "cpu", "--budget-s", "120",
                    "--trace", str(out / "trace"))  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_every_kind_writes_records_with_exactly_the_contract_keys(tiny_run, kind):
    records = read_records(tiny_run / f"{kind}.jsonl")
    assert records, f"no {kind} record"
    for rec in records:
        assert rec["kind"] == kind
        assert list(rec["params"]) == [*PARAM_KEYS[kind], "stack"]
        assert rec["params"]["stack"] == "harness"  # every record names the stack that ran it
        assert set(rec["measured"]) == set(MEASURED_KEYS[kind])
        assert rec["device"] == "cpu"
        assert isinstance(rec["source"], str) and rec["source"]


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_tiny_times_are_positive_and_under_a_second(tiny_run, kind):
    for rec in read_records(tiny_run / f"{kind}.jsonl"):
        assert 0 < rec["measured"]["time_s"] < 1.0, rec


def test_layer_and_train_step_peak_bytes_exceed_the_layer_output(tiny_run):
    for kind in ("layer", "train_step"):
        for rec in read_records(tiny_run / f"{kind}.jsonl"):
            p = rec["params"]
            output_bytes = p["micro_batch"] * p["seq"] * p["hidden"] * 2  # bf16
            assert rec["measured"]["peak_bytes"] > output_bytes, rec
            assert "peak_bytes_definition" in rec


def test_full_recompute_keeps_less_than_none(tiny_run):
    peak = {r["params"]["recompute"]: r["measured"]["peak_bytes"]
            for r in read_records(tiny_run / "train_step.jsonl")}  # fmt: skip
    assert peak["full"] < peak["none"]


def test_booleans_are_json_booleans(tiny_run):
    for kind, key in (
        ("layer", "compiled"),
        ("attention", "causal"),
        ("decode_step", "cuda_graph"),
    ):
        assert {type(r["params"][key]) for r in read_records(tiny_run / f"{kind}.jsonl")} == {bool}


def test_collectives_cover_every_op_at_world_two(tiny_run):
    records = read_records(tiny_run / "collective.jsonl")
    assert {r["params"]["op"] for r in records} == {
        "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"
    }  # fmt: skip
    assert {r["params"]["world"] for r in records} == {2}


def test_tp_mlp_has_both_tensor_parallel_degrees(tiny_run):
    assert {r["params"]["tp"] for r in read_records(tiny_run / "tp_mlp.jsonl")} == {1, 2}


def test_tp_layer_has_both_tensor_parallel_degrees_and_both_passes(tiny_run):
    records = read_records(tiny_run / "tp_layer.jsonl")
    assert {(r["params"]["tp"], r["params"]["pass"]) for r in records} == {
        (1, "fwd"), (1, "fwd_bwd"), (2, "fwd"), (2, "fwd_bwd")
    }  # fmt: skip


def test_environment_and_summary_are_written(tiny_run):
    env = json.loads((tiny_run / "environment.json").read_text())
    assert env["torch"] and env["python"] and env["date_utc"]
    summary = json.loads((tiny_run / "summary.json").read_text())
    by_kind = {k["kind"]: k for k in summary["kinds"]}
    assert set(by_kind) == {*ALL_KINDS, "trace"}
    assert all(k["errors"] == 0 for k in summary["kinds"]), summary


def test_traces_are_written_and_readable(tiny_run):
    from gpuplan.validate.trace import load_trace

    traces = sorted((tiny_run / "trace").glob("*.trace.json*"))
    assert [t.name.split(".")[0] for t in traces] == ["layer_fwd_bwd", "train_step"]
    assert all(load_trace(t)["traceEvents"] for t in traces)


def test_an_exhausted_budget_measures_no_case(tmp_path):
    pytest.importorskip("torch")
    done = _harness("--out", str(tmp_path), "--tiny", "--device", "cpu", "--budget-s", "0",
                    "--kinds", "gemm,layer")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert not (tmp_path / "gemm.jsonl").exists()
    assert "total 0 records" in done.stdout


def test_an_unknown_kind_is_refused_with_the_known_ones(tmp_path):
    done = _harness("--out", str(tmp_path), "--kinds", "gemm,matmul")
    assert done.returncode == 2
    assert "matmul" in done.stderr and "attention" in done.stderr


def test_make_record_refuses_params_that_differ_from_the_contract():
    with pytest.raises(ValueError, match="dtype"):
        make_record("gemm", "h200", {"m": 1, "n": 1, "k": 1}, {"time_s": 1.0}, "test")
    with pytest.raises(ValueError, match="peak_bytes"):
        params = dict.fromkeys(PARAM_KEYS["layer"], 1)
        make_record("layer", "h200", params, {"time_s": 1.0}, "test")


def test_device_names_map_to_catalogue_keys():
    assert device_key("NVIDIA H200") == "h200"
    assert device_key("NVIDIA H100 80GB HBM3") == "h100-sxm"
    assert device_key("NVIDIA H100 PCIe") == "h100-pcie"


def test_a_kind_gets_its_weighted_share_of_the_time_left():
    budget = Budget(100.0, {"a": 1.0, "b": 3.0})
    share_s = budget.kind_deadline("a", ["a", "b"]) - time.monotonic()
    assert 24.0 < share_s <= 25.0


@pytest.mark.gpu
def test_tiny_run_on_cuda_writes_every_single_device_kind(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    kinds = "gemm,attention,elementwise,layer,train_step,decode_step"
    done = _harness("--out", str(tmp_path), "--tiny", "--device", "cuda", "--kinds", kinds)
    assert done.returncode == 0, done.stderr[-2000:]
    for kind in kinds.split(","):
        assert read_records(tmp_path / f"{kind}.jsonl")


DATA = ROOT / "data"
CAMPAIGN_FILES = sorted(
    f
    for run in (
        "h200",
        "h200x2",
        "h200_run2",
        "h200_run3",
        "h200_decode",
        "h200_cudnn",
        "h200x2_tplayer",
    )
    for f in (DATA / run).rglob("*.jsonl")
)


OPTIONAL_PARAMS = tuple(optional_param_rules())  # stack, attention_kernel, timing


def test_committed_measurements_follow_the_contract():
    stems = {f.stem for f in CAMPAIGN_FILES}
    assert set(ALL_KINDS) <= stems <= set(ALL_KINDS)
    for path in CAMPAIGN_FILES:
        for rec in read_records(path):
            assert rec["kind"] == path.stem and rec["device"] == "h200", path
            contract = [k for k in rec["params"] if k not in OPTIONAL_PARAMS]
            assert contract == list(PARAM_KEYS[rec["kind"]]), path
            assert rec["params"]["stack"] == "harness", path  # every committed record names it
            assert set(rec["measured"]) == set(MEASURED_KEYS[rec["kind"]]), path
            assert rec["measured"]["time_s"] > 0 and rec["source"], path


def test_committed_measurements_have_their_environment():
    for folder in {f.parent for f in CAMPAIGN_FILES}:
        env = json.loads((folder / "environment.json").read_text())
        assert env["gpu_name"] == "NVIDIA H200" and env["torch"].startswith("2.11")
