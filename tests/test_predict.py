"""One-GPU predictions of every record kind: shape of the answer and invariants of the sums."""

import math
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.accelerators import get_accelerator
from gpuplan.hwmodels.efficiency import prior_efficiency
from gpuplan.sim.estimate import composite as step
from gpuplan.sim.estimate.whole_model import model_breakdown, train_step_breakdown
from gpuplan.validate.record_prediction import (
    KINDS,
    contract_model,
    predict_breakdown,
    predict_record,
)
from gpuplan.validate.records import read_records
from gpuplan.workloads.presets import get_model

SAMPLE = Path(__file__).parents[1] / "data" / "sample.jsonl"  # a checkout's data/
H200, EFF = get_accelerator("h200"), prior_efficiency()
LLAMA_LAYER = {"hidden": 4096, "heads_q": 32, "heads_kv": 8, "ffn": 14336}


def _sample_records():
    records, errors = read_records(SAMPLE)
    models, model_errors = read_records(SAMPLE.with_name("sample_models.jsonl"))
    assert not errors and not model_errors
    return records + models


def test_the_sample_file_covers_every_kind():
    assert {r.kind for r in _sample_records()} == set(KINDS)


@pytest.mark.parametrize("record", _sample_records(), ids=lambda r: f"{r.kind}-{r.line_no}")
def test_every_record_kind_gets_a_finite_positive_prediction_of_what_it_measures(record):
    predicted = predict_record(record)
    assert set(record.measured) <= set(predicted) | {"peak_bytes"}
    assert all(math.isfinite(v) and v > 0 for v in predicted.values())


@pytest.mark.parametrize("record", _sample_records(), ids=lambda r: f"{r.kind}-{r.line_no}")
def test_the_parts_of_a_breakdown_sum_to_its_total(record):
    bd = predict_breakdown(record.kind, record.device, record.params)
    assert bd.frame()["time_s"].sum() == pytest.approx(bd.total_s)
    assert bd.by("category")["time_s"].sum() == pytest.approx(bd.total_s)


def test_an_unknown_kind_is_an_error_listing_the_kinds():
    with pytest.raises(GpuplanError, match="kind='conv'.*gemm"):
        predict_breakdown("conv", "h200", {})


def test_an_unknown_device_is_an_error_naming_near_keys():
    with pytest.raises(GpuplanError, match="h100"):
        predict_breakdown("gemm", "h100", {"m": 1, "n": 1, "k": 1, "dtype": "bf16"})


def test_a_missing_parameter_is_an_error_naming_it():
    with pytest.raises(GpuplanError, match="'k'"):
        predict_breakdown("gemm", "h200", {"m": 1, "n": 1, "dtype": "bf16"})


def test_backward_makes_a_layer_slower_and_compilation_makes_it_faster():
    cfg = contract_model(LLAMA_LAYER)
    kw = dict(micro_batch=1, seq=2048)
    fwd = step.layer_breakdown(H200, EFF, cfg, pass_="fwd", compiled=False, **kw).total_s
    both = step.layer_breakdown(H200, EFF, cfg, pass_="fwd_bwd", compiled=False, **kw).total_s
    compiled = step.layer_breakdown(H200, EFF, cfg, pass_="fwd_bwd", compiled=True, **kw).total_s
    assert fwd < both and compiled < both


def test_full_recomputation_trades_time_for_memory():
    cfg = contract_model(LLAMA_LAYER | {"layers": 4, "vocab": 32000})
    # a batch whose activations, not the optimizer step, set the peak
    none = train_step_breakdown(H200, EFF, cfg, micro_batch=16, seq=2048, recompute="none")
    full = train_step_breakdown(H200, EFF, cfg, micro_batch=16, seq=2048, recompute="full")
    assert full.total_s > none.total_s and full.peak_bytes < none.peak_bytes


@settings(max_examples=30, deadline=None)
@given(context=st.integers(1, 16_384), extra=st.integers(1, 16_384), graph=st.booleans())
def test_decode_time_never_falls_as_the_context_grows(context, extra, graph):
    cfg = contract_model(LLAMA_LAYER | {"layers": 2})
    t = [
        step.decode_step_breakdown(H200, EFF, cfg, batch=8, context=c, cuda_graph=graph).total_s
        for c in (context, context + extra)
    ]
    assert t[1] >= t[0]


def test_a_cuda_graph_speeds_up_a_small_eager_decode_step():
    # short kernels: the CPU's issue time, not the GPU, sets the pace of eager decode
    cfg = contract_model({"hidden": 1024, "heads_q": 8, "heads_kv": 8, "ffn": 2816, "layers": 4})
    kw = dict(batch=1, context=256, impl="eager")
    eager = step.decode_step_breakdown(H200, EFF, cfg, cuda_graph=False, **kw).total_s
    graph = step.decode_step_breakdown(H200, EFF, cfg, cuda_graph=True, **kw).total_s
    assert graph < eager


def test_tensor_parallel_mlp_adds_its_all_reduces():
    cfg = contract_model(LLAMA_LAYER)
    bd = step.tp_mlp_breakdown(H200, EFF, cfg, tokens=4096, tp=2, pass_="fwd_bwd")
    comm = bd.by("category").set_index("category").loc["communication"]
    assert comm["kernels"] == 2 and comm["time_s"] > 0


@pytest.mark.parametrize("model", ["llama3-8b", "mixtral-8x7b", "deepseek-v3", "gpt3-175b"])
def test_presets_predict_decode_and_train_steps(model):
    params = {
        "batch": 4,
        "context": 1024,
        "cuda_graph": True,
        "dtype": "bf16",
        "micro_batch": 1,
        "seq": 1024,
        "recompute": "full",
        "precision": "bf16-mixed",
        "layers": 4,
    }
    for kind in ("decode_step", "train_step"):
        bd = model_breakdown(kind, H200, EFF, model, params)
        assert bd.total_s > 0


def test_activating_more_experts_never_makes_a_moe_step_faster():
    moe = replace(get_model("mixtral-8x7b"), n_layers=2)
    dense_like = replace(moe, top_k=moe.n_experts)
    kw = dict(micro_batch=1, seq=1024, recompute="none")
    assert (
        train_step_breakdown(H200, EFF, moe, **kw).total_s
        < train_step_breakdown(H200, EFF, dense_like, **kw).total_s
    )
