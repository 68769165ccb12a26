"""Whole-model steps as transformers' modelling code runs them: the sliding-window mask of a
prefill at or past the window, the eager RMSNorm's eight kernels, and a compiled model's call
before its CUDA graph replays."""

import dataclasses

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.sim.estimate.inference import (
    decode_breakdown,
    decode_deployment,
    prefill_breakdown,
    transformers_rmsnorm_calls,
)
from gpuplan.sim.runtime.serving.iteration import Batch, iteration_breakdown
from gpuplan.sim.stacks import HostModel, get_stack, stack_efficiency
from gpuplan.workloads.presets import get_model

H200 = get_accelerator("h200")


def _prefill(stack: str, model: str, seq: int, **cfg_changes):
    st = get_stack(stack)
    cfg = dataclasses.replace(get_model(model), **cfg_changes)
    eff = stack_efficiency(st, efficiency_for("h200"), H200, phase="prefill")
    return prefill_breakdown(H200, eff, cfg, st, batch=1, seq=seq)


def _ops(bd, name):
    return [i for i in bd.items if i.op == name]


def test_a_windowed_prefill_at_the_window_runs_the_full_masked_product():
    # transformers materializes the sliding-window mask from seq >= window: no causal skipping,
    # and GQA keys and values are repeated first; below the window it is plain causal
    w = 4096
    below = _prefill("hf-transformers", "llama3-8b", w - 1024, sliding_window=w)
    at = _prefill("hf-transformers", "llama3-8b", w, sliding_window=w)
    causal = _prefill("hf-transformers", "llama3-8b", w)
    assert not _ops(below, "repeat_kv") and _ops(at, "repeat_kv")
    att = lambda bd: sum(i.time_s for i in bd.items if i.category == "attention")  # noqa: E731
    assert att(at) == pytest.approx(2 * att(causal), rel=0.1)  # every score, not half of them
    # a stack that does not run transformers' code prices the window as the window it is
    plain = _prefill("pytorch", "llama3-8b", w, sliding_window=w)
    assert not _ops(plain, "repeat_kv")
    assert att(plain) == pytest.approx(att(_prefill("pytorch", "llama3-8b", w)), rel=1e-6)


def test_transformers_eager_rmsnorm_is_eight_kernels_and_nine_times_the_bytes():
    cfg = get_model("llama3-8b")
    hf = _prefill("hf-transformers", "llama3-8b", 2048)
    norms = [i for i in hf.items if ".to_float32" in i.op or ".mul_weight" in i.op]
    assert len(norms) == 3 * 2  # two of the eight pieces of the block's two norms and the final one
    pieces = [i for i in hf.items if i.op.startswith(("attn_norm.", "mlp_norm.", "final_norm."))]
    assert sum(i.kernels for i in pieces) == 8 * (2 * cfg.n_layers + 1)
    moved = sum(i.bytes for i in pieces)
    fused_bytes = (2 * cfg.n_layers + 1) * 2048 * cfg.d_model * 2 * 2  # read and write once
    assert moved == pytest.approx(9 * fused_bytes, rel=0.01)
    # Inductor fuses it back into one kernel; plain PyTorch stacks run their own norm
    for other in ("torch-compile", "pytorch"):
        bd = _prefill(other, "llama3-8b", 2048)
        assert not [i for i in bd.items if i.op.startswith("attn_norm.")]
    assert transformers_rmsnorm_calls(cfg, get_stack("hf-transformers")) == 7 * 65
    assert transformers_rmsnorm_calls(cfg, get_stack("torch-compile")) == 0


def test_an_eager_hf_decode_pays_the_norms_torch_calls_on_the_cpu():
    cfg, st = get_model("llama3-8b"), get_stack("hf-transformers")
    eff = stack_efficiency(st, efficiency_for("h200"), H200, phase="decode")
    dep = decode_deployment(H200, eff, cfg, st, kv_cache="static", max_cache_len=1040)
    bare = decode_deployment(H200, eff, cfg, dataclasses.replace(st, repeat_kv_masked=False),
                             kv_cache="static", max_cache_len=1040)
    extra = dep.host_extra_s - bare.host_extra_s
    assert extra == pytest.approx(7 * 65 * eff.host_launch_s)


def test_a_compiled_graph_decode_pays_its_call_and_the_serving_iteration_agrees():
    st = get_stack("torch-compile")
    st = dataclasses.replace(st, host=dataclasses.replace(st.host, graph_call_s=400e-6))
    cfg = get_model("llama3-8b")
    eff = stack_efficiency(st, efficiency_for("h200"), H200, phase="decode")
    bd = decode_breakdown(H200, eff, cfg, st, batch=4, context=1024, max_cache_len=1040)
    call = [i for i in bd.items if i.category == "scheduler"]
    assert len(call) == 1 and call[0].time_s == pytest.approx(400e-6)
    zero = dataclasses.replace(st, host=dataclasses.replace(st.host, graph_call_s=0.0))
    bd0 = decode_breakdown(H200, eff, cfg, zero, batch=4, context=1024, max_cache_len=1040)
    assert bd.total_s - bd0.total_s == pytest.approx(400e-6)
    dep = decode_deployment(H200, eff, cfg, st, max_cache_len=1040)
    served = iteration_breakdown(dep, Batch(decode_seqs=4, decode_kv_tokens=4 * 1025, sampled=4))
    assert bd.total_s == pytest.approx(served.total_s, rel=0.005)
    # not under eager dispatch: there is no graph to replay
    eager = decode_breakdown(H200, eff, cfg, st, batch=4, context=1024, max_cache_len=1040,
                             cuda_graph=False)
    assert not [i for i in eager.items if i.category == "scheduler"]


def test_a_negative_graph_call_cost_is_a_one_line_error():
    with pytest.raises(GpuplanError, match="graph_call_s"):
        HostModel(mode="compiled", graph_call_s=-1e-6)


def test_compiled_dense_training_steps_run_the_eager_foreach_adamw():
    # torch.compile(model) leaves torch.optim.AdamW eager (foreach): the campaign's compiled
    # dense training steps score within 15% priced so (fused: 23-38% under)
    import json
    from pathlib import Path

    from gpuplan.validate.record_prediction import predict_breakdown

    path = Path(__file__).resolve().parents[1] / "data" / "h200_stacks" / "run3" / "models.jsonl"
    rows = [json.loads(line) for line in path.open()]
    rows = [r for r in rows if r["kind"] == "model_train_step"
            and r["params"].get("stack") == "torch-compile"]
    assert rows
    for r in rows:
        pred = predict_breakdown(r["kind"], r["device"], r["params"]).total_s
        assert abs(pred / r["measured"]["time_s"] - 1) < 0.15, r["params"]
