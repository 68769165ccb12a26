"""The vidur profile converter (gpuplan.validate.import_profiles) on a few rows of the published
CSVs (tests/data/vidur: rows copied from microsoft/vidur's data/profiling), and the imported runs
never being fitted."""

import json
from pathlib import Path

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.validate import calibrate, import_profiles
from gpuplan.validate.records import read_records

FIXTURE = Path(__file__).parent / "data" / "vidur"
DATA = Path(__file__).resolve().parents[1] / "data"


def _convert(tmp_path):
    counts = import_profiles.convert(FIXTURE, tmp_path, {"a100": "a100-sxm-80gb"})
    return counts, {k: read_records(tmp_path / "vidur_a100" / f"{k}.jsonl")
                    for k in ("gemm", "elementwise", "collective")}  # fmt: skip


def test_rows_become_contract_records(tmp_path):
    counts, found = _convert(tmp_path)
    # rows at 24 and 2048 tokens are kept (3 x 8, 2**11), 40 (5 x 8) is not: 2 rows x 4 ops
    assert counts["vidur_a100/gemm.jsonl"] == 8
    assert counts["vidur_a100/elementwise.jsonl"] == 8
    for kind, (records, errors) in found.items():
        assert not errors, (kind, errors[:1])
        assert all(r.params["timing"] == "device" and r.params["stack"] == "eager-2023" for r in records)


def test_gemm_shapes_follow_the_layer(tmp_path):
    # Llama-3-8B: 32 heads, 8 KV heads, hidden 4096, ffn 14336; the row at 2048 tokens, TP 2
    recs, _ = read_records(_convert(tmp_path) and tmp_path / "vidur_a100" / "gemm.jsonl")
    tp2 = [(r.params["m"], r.params["n"], r.params["k"]) for r in recs if r.params["m"] == 2048]
    assert tp2 == [(2048, 3072, 4096), (2048, 4096, 2048), (2048, 14336, 4096), (2048, 4096, 7168)]
    lines = (tmp_path / "vidur_a100" / "gemm.jsonl").read_text().splitlines()
    first = json.loads(lines[4])
    assert "Meta-Llama-3-8B/mlp.csv: attn_pre_proj at num_tokens=2048, tp=2" in first["source"]
    assert first["measured"]["time_s"] == pytest.approx(0.001 * float(_csv_median("attn_pre_proj")))


def _csv_median(op: str) -> str:
    import csv

    path = FIXTURE / "data/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv"
    rows = [r for r in csv.DictReader(path.open()) if r["num_tokens"] == "2048"]
    return rows[0][f"time_stats.{op}.median"]


def test_collectives_of_one_host_only(tmp_path):
    _, found = _convert(tmp_path)
    recs = found["collective"][0]
    # the fixture's send_recv rows across two nodes (devices_per_node 1), all-reduce rows over
    # two nodes (8 workers, 4 a node) and a size in bytes that is no power of two (10240) are dropped
    assert [(r.params["op"], r.params["world"], r.params["bytes"]) for r in recs] == [
        ("all_reduce", 8, 2048), ("send_recv", 2, 2048)]  # fmt: skip


def test_missing_profile_is_an_error(tmp_path):
    with pytest.raises(GpuplanError, match="does not exist"):
        import_profiles.convert(tmp_path, tmp_path / "out", {"a100": "a100-sxm-80gb"})


def test_imported_runs_are_never_fitted():
    doc = json.loads((DATA / "runs.json").read_text())
    held = {e["folder"] for e in doc["cross_device"]}
    assert held == {"vidur_a100", "vidur_h100"}
    assert not held & {e["folder"] for e in doc["runs"]}
    found = calibrate.load_runs(DATA, "h200")
    assert not [f for f in found.files if "vidur_" in f]
    assert not [r for r in found.records if r.device != "h200"]
    with pytest.raises(GpuplanError, match="no .* measurement record"):  # no A100 run at all
        calibrate.load_runs(DATA, "a100-sxm-80gb")
    # the H100's own harness run (scored left out, fitted only by the leave-one-device-out
    # refit), never Vidur's profiles
    found = calibrate.load_runs(DATA, "h100-sxm")
    assert [r.name for r in found.runs] == ["h100"]
    assert not [f for f in found.files if "vidur_" in f]


def test_p2p_setup_is_host_time():
    """A send/recv call timed alone pays NCCL's point-to-point setup; its kernel does not."""
    from gpuplan.hwmodels.accelerators import get_accelerator
    from gpuplan.hwmodels.collectives import collective_time
    from gpuplan.hwmodels.efficiency import efficiency_for
    from gpuplan.validate.record_prediction import predict_breakdown

    acc = get_accelerator("h100-sxm")
    eff = efficiency_for("h100-sxm")
    for op in ("send_recv", "all_reduce"):
        params = {"op": op, "world": 2, "bytes": 2048, "dtype": "fp16", "stack": "eager-2023"}
        alone = predict_breakdown("collective", "h100-sxm", {**params, "timing": "isolated"})
        kernel = predict_breakdown("collective", "h100-sxm", {**params, "timing": "device"})
        whole = collective_time(acc, op, 2, 2048, eff).total_s
        assert alone.total_s == pytest.approx(whole)  # the isolated price is unchanged
        setup = eff.p2p_launch_s if op == "send_recv" else 0.0
        assert alone.total_s - kernel.total_s == pytest.approx(setup)


def test_the_cli_names_its_usage_and_a_missing_profile_on_one_line(tmp_path, capsys):
    assert import_profiles.main([str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        "usage: python3 -m gpuplan.validate.import_profiles VIDUR_CHECKOUT OUT_DIR\n")
    assert import_profiles.main([str(tmp_path), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: profile ") and "does not exist" in err
