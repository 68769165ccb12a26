"""The compiled-kernel profile part (stack_campaign/cprofile.py) on a CPU: it skips with its
reason, and its writer keeps the documented JSON, one profile a case, rewritten after each."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

FAKE = {"kernels": [{"name": "ampere_bf16_gemm", "launches_per_call": 14.0,
                     "time_s_per_call": 2.0e-3},
                    {"name": "triton_red_fused_add_mean_mul_pow_rsqrt_0",
                     "launches_per_call": 5.0, "time_s_per_call": 1.0e-4}],
        "total_s_per_call": 2.1e-3, "block_cpu_s_per_call": 5.0e-4}


def test_the_part_skips_without_cuda_and_writes_nothing(tmp_path, capsys):
    from gpuplan.validate.stack_campaign import cprofile
    from gpuplan.validate.stack_campaign.common import TimeBox

    got = cprofile.run(torch, "cpu", "cpu", tmp_path, TimeBox(5), True)
    assert got["skipped"].startswith("needs CUDA and transformers")
    assert "cprofile: skipped" in capsys.readouterr().out
    assert not list(tmp_path.iterdir())


def test_a_decode_case_names_its_static_cache_and_a_prefill_its_seq():
    from gpuplan.validate.stack_campaign.cprofile import case_params

    kind, p = case_params("llama3-8b", 2, "decode", 16, 4096, 4112)
    assert kind == "model_decode_step"
    assert (p["context"], p["kv_cache"], p["max_cache_len"], p["stack"]) == (
        4096, "static", 4112, "torch-compile")
    kind, p = case_params("mixtral-8x7b", 2, "prefill", 1, 8192, None)
    assert kind == "prefill_step" and p["seq"] == 8192 and "context" not in p


def test_the_file_holds_each_case_so_far_with_its_kernels_and_total(tmp_path, monkeypatch):
    from gpuplan.validate.stack_campaign import cprofile, hf
    from gpuplan.validate.stack_campaign.common import TimeBox

    monkeypatch.setattr(hf, "transformers_or_none", lambda: object())
    seen = []

    def fake_phase(torch, tf, hf, part, name, phase, shapes, box, emit):
        if name == "mixtral-8x7b":
            raise RuntimeError("out of memory")
        b, n = shapes[0]
        kind, params = cprofile.case_params(name, 2, phase, b, n, n + 16)
        emit(cprofile.profile_entry(kind, params, FAKE, first_call_s=30.0, graph_breaks={}))
        seen.append(len(json.loads((tmp_path / cprofile.FILE).read_text())["profiles"]))

    monkeypatch.setattr(cprofile, "_phase", fake_phase)
    got = cprofile.run(torch, "cuda", "h200", tmp_path, TimeBox(60), False)
    assert seen == [1, 2, 3, 4]  # rewritten after each case, earlier cases kept
    assert set(got["failed"]) == {"mixtral-8x7b/prefill", "mixtral-8x7b/decode"}
    profiles = json.loads((tmp_path / cprofile.FILE).read_text())["profiles"]
    assert len(profiles) == got["profiles"] == 4
    first = profiles[0]
    assert first["kind"] == "model_decode_step" and first["device"] == "h200"
    assert first["params"]["model"] == "llama3-8b" and first["params"]["batch"] == 16
    assert [k["name"] for k in first["kernels"]] == [k["name"] for k in FAKE["kernels"]]
    assert {"launches_per_call", "time_s_per_call"} <= set(first["kernels"][0])
    assert first["total_s_per_call"] == pytest.approx(2.1e-3)
    assert not list(tmp_path.glob("*.jsonl")) and not list(tmp_path.glob("*.tmp"))


def test_kernels_fall_in_their_classes_by_name():
    from gpuplan.validate.compare_compiled import kernel_class

    assert kernel_class("nvjet_sm90_tst_128x64_64x8_1x2_h_bz_TNT") == "gemm"
    assert kernel_class("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16") == \
        "attention"
    assert kernel_class("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention") == \
        "attention"
    assert kernel_class("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_3") == "elementwise"
    assert kernel_class("_ZN7cutlass13device_kernelIN2at4cuda6detail25enable_3x_kernel_for_sm9x"
                        "INS_4gemm6kernel13GemmUniversalINS5_17GroupProblemShape") == "moe"
    assert kernel_class("Memcpy DtoD (Device -> Device)") == "elementwise"
    assert kernel_class("some_unknown_kernel") == "other"


def test_the_comparison_prices_the_profiled_case_and_sums_its_classes():
    from gpuplan.validate.compare_compiled import compare, measured_classes, priced_classes

    prof = {"kind": "model_decode_step", "kernels": FAKE["kernels"],
            "params": {"model": "llama3-8b", "layers": 2, "batch": 16, "dtype": "bf16",
                       "stack": "torch-compile", "mode": "default (no CUDA graphs)",
                       "context": 1024, "kv_cache": "static", "max_cache_len": 1040}}
    meas = measured_classes(prof)
    assert meas == pytest.approx({"gemm": 2.0e-3, "elementwise": 1.0e-4})
    priced, items = priced_classes(prof)
    # the kernels alone (no launch or CPU items), each item in one class
    assert items and {i.layer for i in items} == {"model"}
    assert sum(priced.values()) == pytest.approx(sum(i.time_s for i in items))
    assert priced["gemm"] > 0 and priced["attention"] > 0
    lines = compare(prof)
    assert lines[0].startswith("llama3-8b L2 decode b16 ctx 1024")
    assert any(line.split()[0] == "total" for line in lines)


def _prefill_items(stack: str, seq: int) -> dict:
    from gpuplan.validate.record_prediction import predict_breakdown

    p = {"model": "llama3-8b", "layers": 2, "batch": 1, "seq": seq, "dtype": "bf16",
         "stack": stack, "timing": "device"}
    return {i.op: i for i in predict_breakdown("prefill_step", "h200", p).items}


def test_a_compiled_prefill_attends_under_the_traced_mask_and_an_eager_one_causally():
    compiled, eager = _prefill_items("torch-compile", 4096), _prefill_items("hf-transformers", 4096)
    assert "attention_mask_read" in compiled and "repeat_kv" in compiled
    assert "attention_mask_read" not in eager and "repeat_kv" not in eager
    # every score under the mask: about twice the causal kernel's time
    assert compiled["attention"].time_s == pytest.approx(2 * eager["attention"].time_s, rel=0.1)
    # 32 query heads read the [1, 1, 4096, 4096] bf16 mask, 2 layers
    assert compiled["attention_mask_read"].bytes == pytest.approx(2 * 32 * 4096**2 * 2)


def test_a_compiled_static_decode_repeats_keys_in_inductors_kernel():
    from gpuplan.hwmodels.efficiency import MEASURED_FRACTION
    from gpuplan.validate.record_prediction import predict_breakdown
    from gpuplan.workloads.ops import INDUCTOR_COPY

    def repeat(stack):
        p = {"model": "llama3-8b", "layers": 2, "batch": 16, "context": 4096, "dtype": "bf16",
             "kv_cache": "static", "max_cache_len": 4112, "stack": stack, "timing": "device"}
        items = predict_breakdown("model_decode_step", "h200", p).items
        return next(i for i in items if i.op == "repeat_kv")

    compiled, eager = repeat("torch-compile"), repeat("hf-transformers")
    assert compiled.bytes == pytest.approx(eager.bytes)
    # the same bytes at Inductor's share of HBM bandwidth, not ATen's copy's
    assert compiled.time_s > eager.time_s
    assert MEASURED_FRACTION[INDUCTOR_COPY] < 1


def test_inductors_copy_share_is_the_committed_profiles_fit():
    from gpuplan.hwmodels.efficiency import MEASURED_FRACTION
    from gpuplan.validate.compare_compiled import PROFILE, repeat_kv_fit
    from gpuplan.workloads.ops import INDUCTOR_COPY

    if not PROFILE.exists():
        pytest.skip(f"{PROFILE} is not in this checkout")
    share, fit, held = repeat_kv_fit(json.loads(PROFILE.read_text())["profiles"])
    assert len(fit) == 5 and len(held) == 2
    assert MEASURED_FRACTION[INDUCTOR_COPY] == pytest.approx(share, abs=0.005)
    for _, (_nbytes, secs, implied) in held:  # the held-out decodes at the fitted share
        assert secs * implied / share == pytest.approx(secs, rel=0.05)


def test_compare_compiled_answers_json_without_profiles_in_one_line(tmp_path, capsys):
    from gpuplan.validate import compare_compiled

    other = tmp_path / "other.json"
    other.write_text("{}")
    assert compare_compiled.main(["--profile", str(other)]) == 2
    name = compare_compiled.PROFILE.name
    assert capsys.readouterr().err == (f"error: --profile {str(other)!r}: no 'profiles' key: "
                                       f"give a {name}\n")
