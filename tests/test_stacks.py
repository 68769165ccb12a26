"""The stack as an input: presets, kernels per device, record params, whole-model steps, and
one cost path for a decode step."""

import json

import pytest

from gpuplan.cli import main
from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.sim.estimate.inference import decode_breakdown, decode_deployment
from gpuplan.sim.estimate.whole_model import model_breakdown
from gpuplan.sim.runtime.serving.iteration import Batch
from gpuplan.sim.runtime.serving.step_model import StepModel
from gpuplan.sim.stacks import get_stack, list_stacks, resolved_attention, stack_efficiency
from gpuplan.validate.record_prediction import predict_breakdown
from gpuplan.workloads.presets import get_model

H200 = get_accelerator("h200")
A100 = get_accelerator("a100-sxm-80gb")
ATT = {"batch": 1, "heads_q": 32, "heads_kv": 8, "seq_q": 8192, "seq_kv": 8192,
       "head_dim": 128, "causal": True, "pass": "fwd", "dtype": "bf16"}


def test_the_four_one_gpu_presets_exist_and_each_names_its_sources():
    names = {s.name for s in list_stacks()}
    assert {"pytorch", "hf-transformers", "torch-compile", "harness"} <= names
    assert all(s.sources for s in list_stacks())


def test_an_unknown_stack_is_an_error_listing_the_known_ones():
    with pytest.raises(GpuplanError, match="did you mean pytorch"):
        get_stack("pytorhc")


def test_pytorch_default_dispatch_is_cudnn_on_hopper_and_flash_on_ampere():
    assert resolved_attention(get_stack("pytorch"), H200).prefill == "cudnn"
    assert resolved_attention(get_stack("pytorch"), A100).prefill == "flash2"
    assert resolved_attention(get_stack("harness"), H200).decode == "flash2"


def test_a_kernel_the_device_cannot_run_is_a_one_line_error(capsys):
    code = main(["estimate", "attention", "--seq-q", "1024", "--gpu", "a100-sxm-80gb",
                 "--attention-kernel", "flash3"])
    err = capsys.readouterr().err
    assert code == 2 and "flash3" in err and "a100-sxm-80gb" in err and err.count("\n") == 1


def test_a_record_with_no_stack_is_plain_pytorch_and_harness_records_keep_the_flash2_kernel():
    plain = predict_breakdown("attention", "h200", ATT).total_s
    assert predict_breakdown("attention", "h200", ATT | {"stack": "pytorch"}).total_s == plain
    harness = predict_breakdown("attention", "h200", ATT | {"stack": "harness"}).total_s
    # the forced kernel's own time (its isolated call's fixed cost is the pytorch stack's)
    forced = predict_breakdown("attention", "h200", ATT | {"attention_kernel": "flash2",
                                                           "timing": "device"}).total_s
    assert harness == pytest.approx(forced, rel=0.02)
    assert plain < harness  # cuDNN's prefill kernel is faster than FlashAttention-2's


def test_only_the_harness_stack_pays_the_l2_flush_of_its_timing():
    gemv = {"m": 1, "n": 57344, "k": 8192, "dtype": "bf16"}
    flushed = predict_breakdown("gemm", "h200", gemv | {"stack": "harness"}).total_s
    # the kernel alone (a plain isolated call adds its own fixed cost: test_stacks_isolated.py)
    plain = predict_breakdown("gemm", "h200", gemv | {"timing": "device"}).total_s
    assert plain < flushed


def test_device_timing_is_the_kernels_alone():
    isolated = predict_breakdown("elementwise", "h200", {"op": "add", "tokens": 8, "hidden": 64,
                                                         "pass": "fwd", "dtype": "bf16"})
    device = predict_breakdown("elementwise", "h200", {"op": "add", "tokens": 8, "hidden": 64,
                                                       "pass": "fwd", "dtype": "bf16",
                                                       "timing": "device"})
    assert device.total_s < isolated.total_s
    assert all(i.category != "launch" for i in device.items)


def test_a_timing_that_is_not_one_of_the_two_is_an_error():
    with pytest.raises(GpuplanError, match="timing='wall'"):
        predict_breakdown("attention", "h200", ATT | {"timing": "wall"})


def test_the_math_kernel_is_slower_than_flash_at_long_sequences():
    math_s = predict_breakdown("attention", "h200", ATT | {"attention_kernel": "math"}).total_s
    flash_s = predict_breakdown("attention", "h200", ATT | {"attention_kernel": "flash2"}).total_s
    assert math_s > flash_s


def _decode(stack, **kw):
    st = get_stack(stack)
    eff = stack_efficiency(st, efficiency_for("h200"), H200, phase="decode")
    return decode_breakdown(H200, eff, get_model("llama3-8b"), st, batch=8, context=4096, **kw)


def test_a_dynamic_cache_costs_time_and_memory_over_a_static_one():
    dynamic, static = _decode("hf-transformers"), _decode("hf-transformers", kv_cache="static")
    assert dynamic.total_s > static.total_s
    assert dynamic.peak_bytes > static.peak_bytes
    assert any(i.op == "kv_cache_cat" for i in dynamic.items)


def test_a_dynamic_cache_under_a_cuda_graph_is_an_error():
    with pytest.raises(GpuplanError, match="dynamic"):
        _decode("torch-compile", kv_cache="dynamic")


def test_a_whole_model_decode_step_is_the_serving_iteration():
    # one cost path: estimate decode-step and the serving simulator's step model agree
    st = get_stack("pytorch")
    eff = stack_efficiency(st, efficiency_for("h200"), H200, phase="decode")
    cfg = get_model("llama3-8b")
    bd = model_breakdown("decode_step", H200, efficiency_for("h200"), "llama3-8b",
                         {"batch": 8, "context": 4096, "cuda_graph": True}, stack=st)
    dep = decode_deployment(H200, eff, cfg, st, cuda_graph=True)
    served = StepModel(dep).iteration_s(Batch(decode_seqs=8, decode_kv_tokens=8 * 4097))
    assert bd.total_s == pytest.approx(served, rel=0.005)


def test_whole_model_kinds_report_time_peak_memory_and_fit(capsys):
    for argv in (["prefill-step", "--model", "llama3-8b", "--seq", "2048"],
                 ["decode-step", "--model", "llama3-8b", "--kv-cache", "dynamic",
                  "--stack", "hf-transformers"],
                 ["train-step", "--model", "llama3-8b", "--seq", "1024", "--layers", "8"]):
        assert main(["estimate", *argv, "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["time_s"] > 0 and doc["peak_bytes"] > 0 and doc["fits"] is True
        assert doc["stack"]["name"] in ("pytorch", "hf-transformers")


def test_a_model_that_does_not_fit_says_so():
    st = get_stack("pytorch")
    bd = model_breakdown("decode_step", H200, efficiency_for("h200"), "deepseek-v3",
                         {"batch": 1, "context": 1024}, stack=st)
    assert bd.peak_bytes > H200.hbm_bytes


def test_hf_mla_caches_decompressed_heads():
    cfg = get_model("deepseek-v3")
    from gpuplan.sim.estimate.inference import kv_bytes_per_token_layer

    assert kv_bytes_per_token_layer(cfg, get_stack("hf-transformers"), "bf16") > \
        10 * kv_bytes_per_token_layer(cfg, get_stack("pytorch"), "bf16")


def _doc(capsys, *argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("stack", ["pytorch", "megatron-te"])
def test_a_one_gpu_training_step_has_one_price_through_every_entry_point(capsys, stack):
    # one cost path: estimate train-step, train --gpus 1, the API, a record, the search
    from gpuplan.sim.parallel import Strategy, estimate_training
    from gpuplan.sim.parallel.estimate import stack_strategy
    from gpuplan.sim.parallel.search import SearchSpace, search
    from gpuplan.sim.parallel.topology import cluster_for
    from gpuplan.validate.record_prediction import contract_model

    shape = {"vocab": 32000, "hidden": 2048, "heads_q": 16, "heads_kv": 8, "ffn": 8192,
             "layers": 8}
    cfg = contract_model(shape)
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in shape.items()]
    est = _doc(capsys, "estimate", "train-step", "--seq", "2048", "--stack", stack, *flags)
    record = predict_breakdown("train_step", "h200", shape | {
        "seq": 2048, "micro_batch": 1, "recompute": "none", "stack": stack})
    api = estimate_training(cfg, stack_strategy(Strategy(), stack), cluster=cluster_for("h200"),
                            seq=2048, stack=stack)
    found = search(cfg, cluster=cluster_for("h200"), gpus=1, global_batch=1, seq=2048,
                   space=SearchSpace(recompute=("none",), zero=(0,), schedules=("1f1b",),
                                     stack=stack, **_state(stack)))
    prices = [est["time_s"], record.total_s, api.step_time_s,
              float(found.frame.iloc[0]["step_time_s"])]
    assert max(prices) <= 1.005 * min(prices), prices


def _state(stack):
    s = get_stack(stack)
    return {"state_precision": "bf16-mixed" if s.mixed_precision == "autocast"
            else "bf16-mixed-megatron", "overlap_dp": s.overlap_dp, "overlap_tp": s.overlap_tp,
            "overlap_pp": s.overlap_pp}


def test_train_on_one_gpu_equals_estimate_train_step(capsys):
    train = _doc(capsys, "train", "--model", "llama3.2-3b", "--gpus", "1", "--global-batch", "1",
                 "--seq", "2048", "--gpu", "h200", "--stack", "pytorch")
    est = _doc(capsys, "estimate", "train-step", "--model", "llama3.2-3b", "--seq", "2048",
               "--gpu", "h200", "--stack", "pytorch")
    assert train["step_time_s"] == pytest.approx(est["time_s"], rel=0.005)
    assert train["peak_memory_per_gpu_bytes"] == pytest.approx(est["peak_bytes"], rel=0.005)


def test_a_record_file_keeps_the_optional_params_and_names_a_bad_one_by_line(tmp_path):
    from gpuplan.validate.records import read_records

    good = {"kind": "gemm", "device": "h200", "measured": {"time_s": 2e-4},
            "params": {"m": 64, "n": 64, "k": 64, "dtype": "bf16", "stack": "harness",
                       "timing": "device", "attention_kernel": "flash2"}}
    bad = good | {"params": good["params"] | {"stack": "bogus"}}
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    records, errors = read_records(path)
    assert records[0].params["stack"] == "harness" and records[0].params["timing"] == "device"
    assert [e.line_no for e in errors] == [2] and "params.stack='bogus'" in errors[0].reason


def test_a_record_forcing_a_kernel_the_device_lacks_names_the_param():
    with pytest.raises(GpuplanError, match="params.attention_kernel='flash3'"):
        predict_breakdown("attention", "a100-sxm-80gb", ATT | {"attention_kernel": "flash3"})


def test_a_printout_says_where_a_stack_was_measured():
    from gpuplan.cli.stack_flags import stack_line

    assert "not measured" not in stack_line(get_stack("pytorch"), H200)
    assert "measured on h200, not on a100-sxm-80gb" in stack_line(get_stack("pytorch"), A100)
    assert "not measured as a whole" in stack_line(get_stack("vllm"), H200)


def test_a_static_cache_shorter_than_the_context_is_a_one_line_error(capsys):
    code = main(["estimate", "decode-step", "--model", "llama3-8b", "--context", "4096",
                 "--kv-cache", "static", "--max-cache-len", "100"])
    err = capsys.readouterr().err
    assert code == 2 and "max_cache_len=100" in err and "4097 or more" in err
