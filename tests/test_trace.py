"""Reading Kineto traces: kernel classes, per-class totals, and the errors a user can meet."""

from __future__ import annotations

import gzip
import json

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.validate.trace import CLASSES, classify_kernel, kernel_table, kernels

# (name, ts_us, dur_us, stream): names as cuBLAS, FlashAttention, ATen, Triton and NCCL print them.
_KERNELS = (
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cublas", 100.0, 40.0, 7),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN", 150.0, 60.0, 7),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, "
     "false, false, cutlass::bfloat16_t>>", 220.0, 30.0, 7),
    ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<...>", 260.0, 50.0, 7),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16>",
     320.0, 5.0, 7),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<MulFunctor>>",
     330.0, 4.0, 7),
    ("void at::native::elementwise_kernel<128, 4, at::native::direct_copy_kernel_cuda>",
     340.0, 3.0, 7),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, MeanOps>>", 345.0, 2.0, 7),
    ("void (anonymous namespace)::cunn_SoftMaxForward<8, c10::BFloat16>", 350.0, 2.0, 7),
    ("void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor<float, 4>>", 360.0, 3.0, 7),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 300.0, 1.0, 21),
    ("some_custom_kernel_nobody_knows", 370.0, 0.5, 7),
)  # fmt: skip


def _write_trace(path, *, gz: bool = False):
    events = [
        {"ph": "X", "cat": "kernel", "name": n, "pid": 0, "tid": s, "ts": ts, "dur": d,
         "args": {"stream": s, "device": 0}}
        for n, ts, d, s in _KERNELS
    ]  # fmt: skip
    events += [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 90.0,
         "dur": 500.0},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD", "pid": 0, "tid": 7, "ts": 10.0,
         "dur": 900.0},
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
    ]  # fmt: skip
    text = json.dumps({"schemaVersion": 1, "traceEvents": events})
    if gz:
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


@pytest.fixture(params=[False, True], ids=["json", "json.gz"])
def trace_path(tmp_path, request):
    name = "t.trace.json.gz" if request.param else "t.trace.json"
    return _write_trace(tmp_path / name, gz=request.param)


def test_only_kernel_events_are_read(trace_path):
    df = kernels(trace_path)
    assert len(df) == len(_KERNELS)
    assert list(df.columns) == ["name", "class", "start_s", "dur_s", "stream"]


def test_kernel_times_are_seconds_from_the_first_kernel(trace_path):
    df = kernels(trace_path)
    assert df["start_s"].iloc[0] == 0.0
    assert df["start_s"].is_monotonic_increasing
    assert df["dur_s"].sum() == pytest.approx(sum(k[2] for k in _KERNELS) * 1e-6)
    assert set(df["stream"]) == {7, 21}


def test_each_library_kernel_lands_in_its_class(trace_path):
    got = dict(zip(kernels(trace_path)["name"], kernels(trace_path)["class"], strict=True))
    expected = ["gemm", "gemm", "attention_fwd", "attention_bwd", "norm", "elementwise",
                "copy_cast", "reduce", "softmax", "optimizer", "nccl", "other"]  # fmt: skip
    assert [got[k[0]] for k in _KERNELS] == expected


def test_table_shares_sum_to_one_and_counts_to_the_kernels(trace_path):
    table = kernel_table(trace_path)
    assert table["share"].sum() == pytest.approx(1.0)
    assert table["count"].sum() == len(_KERNELS)
    assert table["total_s"].is_monotonic_decreasing
    gemm = table.set_index("class").loc["gemm"]
    assert gemm["count"] == 2
    assert gemm["total_s"] == pytest.approx(100e-6)


def test_triton_kernels_from_inductor_are_classified_by_their_fused_ops():
    assert classify_kernel("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0") == "norm"
    assert classify_kernel("triton_poi_fused__to_copy_mul_silu_1") == "elementwise"
    assert classify_kernel("triton_per_fused__softmax_2") == "softmax"
    assert classify_kernel("triton_tem_fused_mm_3") == "gemm"
    assert classify_kernel("fmha_cutlassB_bf16_aligned_64x64_k128_sm80") == "attention_bwd"


def test_every_class_is_a_known_class():
    assert {classify_kernel(k[0]) for k in _KERNELS} <= set(CLASSES)


def test_a_trace_without_kernels_gives_empty_frames(tmp_path):
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a",
                                                 "ts": 1, "dur": 1}]}))  # fmt: skip
    assert kernels(path).empty
    assert list(kernel_table(path).columns) == ["class", "count", "total_s", "share"]


def test_a_missing_trace_is_an_error_naming_the_path(tmp_path):
    with pytest.raises(GpuplanError, match="does not exist"):
        kernels(tmp_path / "nope.json")


def test_a_file_that_is_not_a_trace_is_an_error(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2, 3]")
    with pytest.raises(GpuplanError, match="traceEvents"):
        kernel_table(bad)
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(GpuplanError, match="not a JSON trace"):
        kernel_table(broken)


def test_the_comparison_sets_each_class_of_a_prediction_beside_the_trace():
    import pandas as pd

    from gpuplan.validate.trace_compare import compare_case

    params = {
        "hidden": 256,
        "heads_q": 4,
        "heads_kv": 2,
        "ffn": 512,
        "seq": 128,
        "micro_batch": 1,
        "pass": "fwd_bwd",
        "compiled": False,
        "dtype": "bf16",
    }
    measured = pd.DataFrame(
        {
            "class": ["gemm", "attention_fwd"],
            "count": [24, 2],
            "total_s": [2e-3, 1e-4],
            "share": [0.95, 0.05],
        }
    )
    table, iterations = compare_case(measured, "layer", "h200", params)
    assert iterations == 2  # 24 measured GEMMs over 12 predicted per iteration
    row = table.set_index("class").loc["gemm"]
    assert row["measured_s"] == 1e-3 and row["predicted_kernels"] == 12
    assert {"attention_bwd", "norm", "elementwise"} <= set(table["class"])


def test_a_trace_without_kernels_is_an_error_where_kernels_are_required(tmp_path):
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a",
                                                 "ts": 1, "dur": 1}]}))  # fmt: skip
    with pytest.raises(GpuplanError, match="holds no GPU kernels"):
        kernel_table(path, require_kernels=True)


def test_validate_trace_on_a_trace_without_kernels_exits_2_with_one_line(tmp_path, capsys):
    from gpuplan.cli import main

    path = tmp_path / "cpu.json"
    path.write_text(json.dumps({"traceEvents": []}))
    assert main(["validate", "trace", str(path)]) == 2  # bad input: nothing to break down
    err = capsys.readouterr().err
    assert "no GPU kernels" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "data",
    [bytes(range(256)), b"\xff\xfe{}", b"\x1f\x8b\x08\x00truncated", b'{"traceEvents": 1' + b"0" * 5000,
     b"[" * 100_000],
    ids=["binary", "not-utf8", "bad-gzip", "big-int", "deep"],
)  # fmt: skip
def test_a_file_that_is_no_trace_is_one_line(tmp_path, data):
    path = tmp_path / ("t.json.gz" if data.startswith(b"\x1f\x8b") else "t.json")
    path.write_bytes(data)
    with pytest.raises(GpuplanError) as err:
        kernel_table(path)
    assert "\n" not in str(err.value) and "t.json" in str(err.value)


@pytest.mark.parametrize(
    ("change", "field"),
    [({"ts": "x"}, "ts="), ({"dur": float("nan")}, "dur="), ({"dur": -1}, "dur=-1"),
     ({"name": None}, "name="), ({"ts": True}, "ts=")],
)  # fmt: skip
def test_a_bad_kernel_event_is_named_by_its_index_and_field(tmp_path, change, field):
    event = {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 1.0, "dur": 2.0} | change
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": ["not an event", event]}))
    with pytest.raises(GpuplanError, match=r"traceEvents\[1\]") as err:
        kernels(path)
    assert field in str(err.value)


def test_the_iterations_of_a_comparison_must_be_a_whole_number_above_zero(trace_path):
    from gpuplan.validate.trace_compare import compare_case

    table = kernel_table(trace_path)
    params = {"m": 256, "n": 256, "k": 256, "dtype": "bf16"}
    for bad in (0, -1, 2.5, True):
        with pytest.raises(GpuplanError, match="iterations="):
            compare_case(table, "gemm", "h200", params, iterations=bad)
