"""aiconfigurator's kernel tables (data/aiconfigurator_sample): the reader, the row -> case
mapping, and that every sampled row is answered or carries a one-line reason. Behaviour only:
no accuracy threshold (the rows are held out; docs/aiconfigurator.md reports the errors)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from gpuplan.errors import GpuplanError
from gpuplan.validate.published import aiconfigurator as aic
from gpuplan.validate.published import aiconfigurator_cases as cases

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "aiconfigurator_sample"


@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    return aic.read_tables(aic.find_data(SAMPLE))


@pytest.fixture(scope="module")
def scored(rows) -> pd.DataFrame:
    return cases.score(rows)


def test_reader_reads_every_kind_of_every_catalogued_system(rows):
    known = aic.known_devices()
    assert {"b200_sxm", "gb200", "h100_sxm", "h200_sxm", "a100_sxm"} <= set(known)
    present = set(rows["system"])
    assert present == {s for s in known if (SAMPLE / s).is_dir()}
    for system in present:
        kinds = set(rows.loc[rows["system"] == system, "kind"])
        assert kinds == set(aic.KINDS), system
    # one version per (system, table, framework), the source's device name kept beside ours
    assert not rows.groupby(["system", "kind", "fw"])["fw_version"].nunique().gt(1).any()
    assert rows["device_name"].str.startswith("NVIDIA").all()


def test_every_row_is_answered_or_carries_a_one_line_reason(rows, scored):
    assert len(scored) == len(rows)  # none dropped
    answered = scored["reason"] == ""
    assert answered.any()
    assert scored.loc[answered, "predicted_s"].map(math.isfinite).all()
    assert (scored.loc[answered, "predicted_s"] > 0).all()
    missing = scored.loc[~answered]
    assert missing["predicted_s"].isna().all()
    assert not missing["reason"].str.contains("\n").any()
    # a reason names the field and value it refuses
    assert missing["reason"].str.contains("=").all()


def test_answered_share_counts_every_row(scored):
    table = cases.summarize(scored)
    assert table["n"].sum() == len(scored)
    assert table["answered"].sum() == int((scored["reason"] == "").sum())
    assert ((table["answered"] <= table["n"]) & (table["answered_frac"] <= 1)).all()
    ok = table[table["answered"] > 0]
    assert (ok["p90_abs_pct"] >= ok["median_abs_pct"]).all()
    assert (ok["signed_median_pct"].abs() <= ok["p90_abs_pct"] + 1e-9).all()


def test_blackwell_rows_are_priced_on_their_frameworks_stacks(scored):
    bw = scored[scored["device"].isin(["b200", "gb200"])]
    # every kind answers on sm_100 for every framework (no kernel refused there)
    for (kind, fw), g in bw.groupby(["kind", "framework"]):
        assert (g["reason"] == "").any(), (kind, fw)
    assert set(bw["framework"]) == {"trtllm", "vllm", "sglang", "nccl"}


def test_row_case_maps_dtypes_shapes_and_stacks():
    gemm = {"kind": "gemm", "fw": "vllm", "device": "b200", "kernel_source": "x",
            "gemm_dtype": "fp8_block", "m": 8, "n": 4096, "k": 7168}
    kind, p = cases.row_case(gemm)
    assert (kind, p["dtype"], p["stack"], p["timing"]) == ("gemm", "fp8", "vllm", "device")
    gen = {"kind": "generation_attention", "fw": "trtllm", "kernel_source": "torch_flow",
           "batch_size": 4, "isl": 1, "step": 1023, "num_heads": 32, "num_key_value_heads": 8,
           "head_dim": 128, "window_size": 0, "beam_width": 1, "attn_dtype": "bfloat16",
           "kv_cache_dtype": "fp8"}
    kind, p = cases.row_case(gen)
    assert (kind, p["seq_q"], p["seq_kv"], p["dtype"], p["stack"]) == \
        ("attention", 1, 1024, "fp8", "trt-llm")
    ag = {"kind": "nccl", "fw": "nccl", "kernel_source": "NCCL", "op_name": "all_gather",
          "nccl_dtype": "half", "num_gpus": 8, "message_size": 1024}
    kind, p = cases.row_case(ag)
    assert (p["op"], p["bytes"], p["world"], p["stack"]) == ("all_gather", 256, 8, "trt-llm")
    eager = {"kind": "custom_allreduce", "fw": "sglang", "op_name": "all_reduce",
             "kernel_source": "SGLang_CustomAllReduce_eager", "allreduce_dtype": "bfloat16",
             "num_gpus": 2, "message_size": 128}
    assert cases.row_case(eager)[1]["timing"] == "isolated"


def test_unpriceable_rows_say_why():
    row = {"kind": "gemm", "fw": "trtllm", "device": "a100-sxm-80gb", "kernel_source": "x",
           "gemm_dtype": "int8_wo", "m": 1, "n": 128, "k": 128, "latency": 0.01}
    predicted, _, reason = cases.price_row(row)
    assert math.isnan(predicted) and reason.startswith("gemm_dtype=int8_wo")
    int4 = cases.price_row(dict(row, gemm_dtype="int4_wo"))  # W4A16: estimate gemm's int4
    assert int4[0] > 0 and not int4[2]
    bad = dict(row, gemm_dtype="fp8", device="a100-sxm-80gb")  # no FP8 on the A100
    predicted, _, reason = cases.price_row(bad)
    assert math.isnan(predicted) == bool(reason)


def test_sliding_window_shortens_prefill():
    row = {"kind": "context_attention", "fw": "trtllm", "device": "b200",
           "kernel_source": "torch_flow", "batch_size": 1, "isl": 8192, "step": 0,
           "num_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "beam_width": 1,
           "attn_dtype": "bfloat16", "kv_cache_dtype": "bfloat16"}
    full = cases.price_row(dict(row, window_size=0))[0]
    windowed = cases.price_row(dict(row, window_size=1024))[0]
    assert windowed < full


def test_versions_order_numbers_as_numbers():
    assert aic.version_key("1.3.0rc20") > aic.version_key("1.3.0rc9")
    assert aic.version_key("0.5.14") > aic.version_key("0.5.6.post2")
    assert aic.version_key("2.27.3") > aic.version_key("2.23")


def test_bad_data_folder_and_names_are_one_line_errors(tmp_path):
    with pytest.raises(GpuplanError, match="--data=.*holds no aiconfigurator tables"):
        aic.find_data(tmp_path)
    with pytest.raises(GpuplanError, match="system='tpu'"):
        aic.read_tables(SAMPLE, systems=["tpu"])
    with pytest.raises(GpuplanError, match="kind='moe'"):
        aic.read_tables(SAMPLE, kinds=["moe"])


def test_a_folder_without_tables_or_data_anywhere_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "h100_sxm").mkdir()  # a system's folder, but no table in it
    with pytest.raises(GpuplanError, match="no aiconfigurator tables of gemm under"):
        aic.read_tables(aic.find_data(tmp_path), kinds=["gemm"])
    monkeypatch.setattr(aic.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(aic, "CACHE_DIR", tmp_path / "no-cache")
    with pytest.raises(GpuplanError, match=r"none given \(--data DIR\)"):
        aic.find_data(download=False)


def test_the_diagnosis_of_a_bad_data_folder_is_one_line_and_exit_2(tmp_path, capsys):
    import sys

    sys.path.insert(0, str(SAMPLE.parents[1] / "benchmarks"))
    import aiconfigurator_diagnose

    assert aiconfigurator_diagnose.main(["--data", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --data=") and err.count("\n") == 1


def test_sample_is_deterministic():
    a = aic.read_tables(SAMPLE, kinds=["gemm"], systems=["b200_sxm"], sample=20, seed=1)
    b = aic.read_tables(SAMPLE, kinds=["gemm"], systems=["b200_sxm"], sample=20, seed=1)
    pd.testing.assert_frame_equal(a, b)
    assert len(a) == 20 * a["path"].nunique()
