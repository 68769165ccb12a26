"""Blackwell and low precision end to end (issue 23, item 3): the catalogue's FP4/FP6 rates and new
devices, the block-scaled formats' bytes, ``estimate gemm`` in them, ``serve`` with NVFP4/MXFP4
weights, ``train --precision mxfp8|nvfp4``, and gpt-oss's MXFP4 experts."""

from __future__ import annotations

import contextlib
import io

import pytest

from gpuplan.cli import main
from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.hwmodels.formats import MXFP4, MXFP8, NVFP4, device_formats
from gpuplan.hwmodels.gemm import gemm_time
from gpuplan.sim.estimate.kernels import gemm_breakdown
from gpuplan.sim.parallel.fp8 import BLOCK_CAST_BYTES, CAST_BYTES, fp8_cast_ops
from gpuplan.sim.parallel.topology import get_cluster
from gpuplan.sim.runtime.serving.kv_cache import weights_bytes_per_gpu
from gpuplan.sim.runtime.serving.quantization import quantized_gemm_time, weight_path
from gpuplan.workloads.model import ModelConfig
from gpuplan.workloads.ops import Gemm
from gpuplan.workloads.params import count_params, ffn_params


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def _one_line_error(argv: list[str]) -> str:
    rc, _, err = _run(argv)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("gpuplan: error: "), err
    return lines[0]


# --- the catalogue --------------------------------------------------------------------------


def test_fp4_and_fp6_rates_only_where_the_silicon_has_them():
    for key in ("h100-sxm", "h200", "a100-sxm-80gb", "mi300x", "mi325x", "tpu-v5p", "tpu-v7"):
        acc = get_accelerator(key)
        assert not acc.supports("fp4") and not acc.supports("fp6"), key
    b200, gb200 = get_accelerator("b200"), get_accelerator("gb200")
    assert b200.peak("fp4") == 2 * b200.peak("fp8") == 9e15  # datasheet 18 PF sparse
    assert gb200.peak("fp4") == 1e16 and gb200.peak("fp6") == gb200.peak("fp8")
    mi355x = get_accelerator("mi355x")  # CDNA4: FP6 at the FP4 rate, twice FP8
    assert mi355x.peak("fp6") == mi355x.peak("fp4") == pytest.approx(2 * mi355x.peak("fp8"), 1e-4)


def test_blackwell_ultra_raises_fp4_and_cuts_int8():
    b200, b300, gb300 = (get_accelerator(k) for k in ("b200", "b300", "gb300"))
    assert b300.peak("fp4") > 1.4 * b200.peak("fp4")
    assert gb300.peak("fp4") == pytest.approx(1.08e18 / 72)  # the rack's 1.08 EF dense / 72
    for acc in (b300, gb300):
        assert acc.peak("int8") < b200.peak("int8") / 10, acc.key
        assert "INT8" in acc.notes and "FP64" in acc.notes


def test_new_rows_cite_their_sources_and_state_dense_rates():
    for key, cited in (("b300", "Blackwell Ultra"), ("gb300", "GB300 NVL72"),
                       ("mi355x", "MI355X data sheet"), ("tpu-v6e", "TPU v6e"),
                       ("tpu-v7", "TPU7x (Ironwood)")):  # fmt: skip
        acc = get_accelerator(key)
        assert cited in acc.source, key
        assert acc.notes
    assert get_accelerator("tpu-v7").peak("fp8") == 2 * get_accelerator("tpu-v7").peak("bf16")
    assert get_accelerator("NVIDIA B300 SXM6 AC").key == "b300"


def test_gb300_racks_are_one_72_gpu_nvlink_domain_like_gb200():
    gb200, gb300 = get_cluster("gb200-nvl72"), get_cluster("gb300-nvl72")
    assert gb300.scaleup_size == gb200.scaleup_size == 72
    assert gb300.gpus_per_node == 4 and gb300.gpu == "gb300"
    assert gb300.scaleout_bytes_per_s == 2 * gb200.scaleout_bytes_per_s  # ConnectX-8 800 Gb/s


# --- formats and estimate gemm ----------------------------------------------------------------


def test_block_formats_count_their_scales():
    assert NVFP4.bytes_per_value == 0.5 + 1 / 16  # E4M3 per 16 values
    assert MXFP4.bytes_per_value == 0.5 + 1 / 32  # E8M0 per 32 values
    assert MXFP8.bytes_per_value == 1 + 1 / 32
    assert NVFP4.tensor_bytes(32) == 16 + 2 + 4  # values, two block scales, one FP32 scale
    assert MXFP4.tensor_bytes(33) == 16.5 + 2  # a partial block still has its scale


def test_which_device_computes_in_which_block_format():
    assert device_formats(get_accelerator("b200")) == ["nvfp4", "mxfp4", "mxfp8"]
    assert device_formats(get_accelerator("b300")) == ["nvfp4", "mxfp4", "mxfp8"]
    assert device_formats(get_accelerator("mi355x")) == ["mxfp4", "mxfp8"]  # no NVFP4
    assert device_formats(get_accelerator("h200")) == []


def _gemm_s(gpu: str, dtype: str, m=8192, n=8192, k=8192) -> float:
    acc = get_accelerator(gpu)
    return gemm_breakdown(acc, efficiency_for(gpu), m=m, n=n, k=k, dtype=dtype).items[0].time_s


@pytest.mark.parametrize("gpu", ["b200", "b300", "gb300"])
def test_a_large_fp4_gemm_runs_at_the_devices_fp4_over_fp8_rate(gpu):
    acc = get_accelerator(gpu)
    ratio = acc.peak("fp4") / acc.peak("fp8")
    assert _gemm_s(gpu, "fp8") / _gemm_s(gpu, "nvfp4") == pytest.approx(ratio, rel=0.03)
    assert _gemm_s(gpu, "mxfp4") == pytest.approx(_gemm_s(gpu, "nvfp4"), rel=0.03)
    assert _gemm_s(gpu, "mxfp8") == pytest.approx(_gemm_s(gpu, "fp8"), rel=0.03)


def test_a_skinny_fp4_gemm_moves_the_block_scales():
    acc = get_accelerator("b200")
    bd = gemm_breakdown(acc, efficiency_for("b200"), m=1, n=8192, k=8192, dtype="nvfp4")
    assert bd.items[0].bytes == pytest.approx(2 * 4 + 8192 * 8192 * 0.5625 + 8192 * 0.5625 + 2 * 8192)
    assert _gemm_s("b200", "mxfp4", m=1) < _gemm_s("b200", "nvfp4", m=1)  # fewer scale bytes


def test_estimate_gemm_refuses_a_format_the_device_lacks_in_one_line():
    base = ["estimate", "gemm", "--m", "256", "--n", "1024", "--k", "1024"]
    line = _one_line_error([*base, "--gpu", "h200", "--dtype", "nvfp4"])
    assert "h200 (sm_90)" in line and "NVFP4 tensor cores" in line and "fp8" in line
    line = _one_line_error([*base, "--gpu", "mi355x", "--dtype", "nvfp4"])
    assert "mi355x (gfx950)" in line and "mxfp4" in line  # what it does compute in
    line = _one_line_error([*base, "--gpu", "tpu-v7", "--dtype", "mxfp4"])
    assert "tpu-v7" in line and "Blackwell or CDNA4" in line
    rc, _, err = _run([*base, "--gpu", "mi355x", "--dtype", "mxfp4"])
    assert rc == 0, err


def test_the_gemm_model_refuses_a_block_format_the_device_lacks():
    # Hopper has an fp8 rate but no MX tensor cores: mxfp8 must not price as fp8 there
    with pytest.raises(GpuplanError, match=r"dtype='mxfp8' cannot run on h200 \(sm_90\)"):
        gemm_time(get_accelerator("h200"), 256, 1024, 1024, "mxfp8", efficiency_for("h200"))


def test_estimate_gemm_int4_is_the_weight_only_gemm_serve_prices():
    acc, eff = get_accelerator("h200"), efficiency_for("h200")
    served = quantized_gemm_time(acc, Gemm(name="o_proj", m=4, n=4096, k=4096, dtype="bf16"), eff,
                                 weight_dtype="int4")  # fmt: skip
    bd = gemm_breakdown(acc, eff, m=4, n=4096, k=4096, dtype="int4")
    assert bd.items[0].time_s == pytest.approx(served.total_s)
    assert bd.items[0].time_s < gemm_breakdown(acc, eff, m=4, n=4096, k=4096,
                                               dtype="bf16").items[0].time_s  # fmt: skip


def test_estimate_gemm_nvfp4_is_the_cost_serve_puts_on_nvfp4_weights():
    acc, eff = get_accelerator("b200"), efficiency_for("b200")
    op = Gemm(name="down_proj", m=512, n=8192, k=28672, dtype="bf16")
    served = quantized_gemm_time(acc, op, eff, weight_dtype="nvfp4")
    priced = gemm_breakdown(acc, eff, m=512, n=8192, k=28672, dtype="nvfp4").items[0].time_s
    assert priced == pytest.approx(served.total_s)


# --- serve ----------------------------------------------------------------------------------


SERVE = ["serve", "--model", "llama3-8b", "--rate", "1", "--requests", "4", "--prompt-tokens", "64",
         "--output-tokens", "8", "--no-timing"]


def test_serve_says_how_block_weights_run_on_each_device():
    rc, out, err = _run([*SERVE, "--gpu", "h200", "--weight-dtype", "nvfp4"])
    assert rc == 0, err
    assert "weight-only on h200 (dequantized to bf16" in out
    rc, out, _ = _run([*SERVE, "--gpu", "b200", "--weight-dtype", "nvfp4"])
    assert "W4A4 on b200's FP4 tensor cores" in out
    rc, out, _ = _run([*SERVE, "--gpu", "b200", "--weight-dtype", "mxfp4"])
    assert "weight-only on b200" in out and "vLLM" in out
    assert weight_path(get_accelerator("h200"), "int4") == ""  # a plain format: nothing to say


def test_trt_llm_refuses_nvfp4_off_blackwell_in_one_line():
    line = _one_line_error([*SERVE, "--gpu", "h200", "--weight-dtype", "nvfp4", "--stack",
                            "trt-llm"])  # fmt: skip
    assert "h200" in line and "Blackwell" in line and "--stack vllm" in line


def test_block_weights_take_their_scales_in_memory():
    cfg = ModelConfig(name="t", n_layers=2, d_model=1024, n_heads=8, n_kv_heads=8, d_ff=4096,
                      vocab_size=1000)  # fmt: skip
    pc = count_params(cfg)
    vocab = (pc.embedding + pc.lm_head) * 2 + pc.final_norms * 2
    for w, per in (("nvfp4", 0.5625), ("mxfp4", 0.53125), ("int4", 0.5 + 2 / 128)):
        got = weights_bytes_per_gpu(cfg, tp=1, weight_dtype=w)
        assert got == pytest.approx(sum(pc.per_layer) * per + vocab), w


# --- train ----------------------------------------------------------------------------------


def test_block_recipes_add_their_quantize_kernels():
    op = Gemm(name="fc1", m=4096, n=14336, k=4096, dtype="nvfp4")
    fwd, bwd = fp8_cast_ops([op], "fused")
    x, dy = 4096 * 4096, 4096 * 14336
    assert fwd[0].bytes_moved == pytest.approx(x * BLOCK_CAST_BYTES["nvfp4"]["x"])
    assert bwd[0].bytes_moved == pytest.approx(dy * BLOCK_CAST_BYTES["nvfp4"]["dy"])
    # nvfp4 pays two amax passes (tensor and Hadamard-transformed) beyond mxfp8's one quantize
    assert BLOCK_CAST_BYTES["nvfp4"]["x"] > BLOCK_CAST_BYTES["mxfp8"]["x"] > CAST_BYTES["fused"]["x"]
    assert fp8_cast_ops([Gemm(name="fc1", m=8, n=8, k=8, dtype="bf16")], "fused") == ([], [])


TRAIN = ["train", "--model", "llama3-8b", "--gpus", "8", "--no-timing", "--json"]


def _step_s(gpu: str, precision: str) -> float:
    import json

    rc, out, err = _run([*TRAIN, "--gpu", gpu, "--precision", precision])
    assert rc == 0, err
    return json.loads(out)["step_time_s"]


def test_nvfp4_and_mxfp8_training_on_blackwell():
    bf16, fp8, mxfp8, nvfp4 = (_step_s("b200", p) for p in ("bf16", "fp8", "mxfp8", "nvfp4"))
    assert nvfp4 < fp8 < bf16
    assert fp8 < mxfp8 < bf16  # the same FP8 rate, more quantize traffic than delayed scaling


def test_block_recipes_keep_both_orientations_of_their_weights():
    import json

    weights = {}
    for p in ("bf16", "fp8", "mxfp8", "nvfp4"):
        rc, out, err = _run([*TRAIN, "--gpu", "b200", "--precision", p])
        assert rc == 0, err
        weights[p] = json.loads(out)["memory_bytes"]["weights"]
    n = (weights["fp8"] - weights["bf16"]) / 1.0  # parameters per GPU: fp8 adds one byte each
    assert weights["mxfp8"] - weights["bf16"] == pytest.approx(n * 2 * (1 + 1 / 32))
    assert weights["nvfp4"] - weights["bf16"] == pytest.approx(n * 2 * (0.5 + 1 / 16))


@pytest.mark.parametrize(("gpu", "precision"), [("h200", "mxfp8"), ("h100-sxm", "nvfp4"),
                                                ("mi355x", "nvfp4"), ("a100-sxm-80gb", "fp8")])
def test_train_refuses_a_recipe_the_device_lacks_in_one_line(gpu, precision):
    line = _one_line_error([*TRAIN, "--gpu", gpu, "--precision", precision])
    assert gpu in line and precision in line


# --- gpt-oss's MXFP4 experts --------------------------------------------------------------------


def _gpt_oss_20b(expert_weight_dtype: str = "mxfp4") -> ModelConfig:
    """gpt-oss-20b as its config.json reads (openai/gpt-oss-20b): 24 layers, hidden 2880, 64
    heads of 64, 8 KV heads, 32 experts top-4 of width 2880, vocabulary 201088, a 128-token
    window on alternate layers, experts in MXFP4."""
    return ModelConfig(name="gpt-oss-20b", n_layers=24, d_model=2880, n_heads=64, n_kv_heads=8,
                       d_head=64, d_ff=2880, vocab_size=201088, n_experts=32, top_k=4,
                       d_ff_expert=2880, sliding_window=128, local_per_global=1,
                       expert_weight_dtype=expert_weight_dtype)  # fmt: skip


def test_gpt_oss_experts_are_stored_in_mxfp4_the_rest_in_the_serve_dtype():
    cfg = _gpt_oss_20b()
    pc = count_params(cfg)
    experts = 24 * 32 * ffn_params(cfg, 2880)
    rest = sum(pc.per_layer) - experts
    head = (pc.embedding + pc.lm_head) * 2 + pc.final_norms * 2
    for w, per in (("bf16", 2), ("fp8", 1)):
        got = weights_bytes_per_gpu(cfg, tp=1, weight_dtype=w)
        assert got == pytest.approx(rest * per + experts * MXFP4.bytes_per_value + head)
    plain = weights_bytes_per_gpu(_gpt_oss_20b(""), tp=1, weight_dtype="bf16")
    assert weights_bytes_per_gpu(cfg, tp=1, weight_dtype="bf16") < plain / 3


def test_gpt_oss_expert_gemms_are_priced_in_mxfp4():
    from gpuplan.sim.runtime.serving.on_stack import stack_deployment
    from gpuplan.sim.runtime.serving.step_model import StepModel

    mx, bf = (StepModel(stack_deployment(_gpt_oss_20b(e), "h200", "vllm")) for e in ("mxfp4", ""))
    assert mx.decode_s(8, 8 * 1000) < bf.decode_s(8, 8 * 1000)  # experts stream a quarter
    with pytest.raises(GpuplanError, match="gpt-oss-20b: expert_weight_dtype=.nope. is invalid"):
        stack_deployment(_gpt_oss_20b("nope"), "h200", "vllm")


def test_diagnose_offers_nvfp4_on_blackwell_and_bounds_by_the_fastest_training_rate():
    rc, out, err = _run(["diagnose", "train", "--model", "llama3-8b", "--gpu", "b200", "--gpus",
                         "8", "--no-timing"])  # fmt: skip
    assert rc == 0, err
    assert "NVFP4 GEMMs" in out and "fp4 dense peak" in out
    rc, out, err = _run(["diagnose", "train", "--model", "llama3-8b", "--gpu", "h200", "--gpus",
                         "8", "--no-timing"])  # fmt: skip
    assert rc == 0, err
    assert "NVFP4" not in out and "fp8 dense peak" in out
