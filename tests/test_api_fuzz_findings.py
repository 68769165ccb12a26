"""What ``benchmarks/fuzz_api.py`` found, pinned: each hostile call into ``gpuplan.api`` that
ended in a bare built-in exception (AttributeError, TypeError, KeyError, ...), a GpuplanError
pages long, or a silent nonsense result (NaN, an infinite or negative size or duration) is now
a one-line GpuplanError naming the argument."""

import dataclasses
import math

import numpy as np
import pytest

from gpuplan.api import (
    Accelerator,
    Breakdown,
    Cluster,
    Efficiency,
    GpuplanError,
    Images,
    Strategy,
    backward_of,
    breakdown_bar,
    count_params,
    decode_step_breakdown,
    deployment,
    edge_estimates,
    efficiency_for,
    estimate_training,
    get_accelerator,
    get_cluster,
    get_model,
    image_tokens,
    kv_cache_bytes_per_token,
    layer_activation_bytes,
    layer_forward,
    make_workload,
    model_breakdown,
    model_forward,
    operator_points,
    plan_serving,
    predict_breakdown,
    predicted_vs_measured,
    price,
    roofline,
    run_budget,
    run_scenario,
    search_training,
    simulate,
    simulate_cluster,
    simulate_step,
    train_step_breakdown,
    training_flops,
    training_state_bytes,
    with_images,
)
from gpuplan.sim.runtime.cluster import ClusterConfig, JobSpec
from gpuplan.sim.runtime.serving.deployment import SchedulerConfig
from gpuplan.sim.runtime.serving.plan_space import SearchSpace, Slo

M = get_model("llama3.2-3b")
ACC = get_accelerator("h200")
EFF = efficiency_for("h200")
CL = get_cluster("dgx-h100")
ST = Strategy(dp=8, global_batch=8)
OPS = layer_forward(M, batch=1, seq=128)
LOAD = make_workload(rate_per_s=1.0, n=8, prompt_tokens=64, output_tokens=8)
LENGTHS = (np.full(20, 64), np.full(20, 8))
SMALL = SearchSpace(tps=(1,), formats=(("bf16", "bf16"),), max_seqs=(8,), ratios=())
SLO = Slo(ttft_s=1.0, tpot_s=0.1)
GEMM = {"m": 64, "n": 64, "k": 64, "dtype": "bf16"}
JOB = JobSpec(id="a", arrival_s=0.0, gpus=8, step_time_s=1.0, steps=10)


def fields_of(obj, **changes):
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init} | changes


def plan(**kw):
    base = dict(rate_per_s=1.0, slo=SLO, lengths=LENGTHS, requests=20, space=SMALL, top=1)
    return plan_serving("llama3.2-3b", "h200", **(base | kw))


# (the argument the message must name, the call); every one raised a built-in error before
WRONG_KIND = {
    "count_params": ("cfg", lambda: count_params(-math.inf)),
    "layer_forward": ("cfg", lambda: layer_forward("nope", batch=1, seq=128)),
    "backward_of": ("ops", lambda: backward_of(M)),
    "kv_cache_bytes_per_token": ("cfg", lambda: kv_cache_bytes_per_token(CL)),
    "image_tokens": ("images", lambda: image_tokens(get_model("qwen2-vl-7b"), 2**63)),
    "price(acc)": ("acc", lambda: price(OPS[0], {"a": 1}, EFF)),
    "price(op)": ("op", lambda: price(math.inf, ACC, EFF)),
    "predict_breakdown": ("eff", lambda: predict_breakdown("gemm", "h200", GEMM, eff=CL)),
    "model_breakdown": ("acc", lambda: model_breakdown("decode_step", 0, EFF, M,
                                                       {"batch": 1, "context": 128})),
    "train_step_breakdown": ("eff", lambda: train_step_breakdown(ACC, -math.inf, M,
                                                                 micro_batch=1, seq=128)),
    "decode_step_breakdown": ("acc", lambda: decode_step_breakdown(
        math.nan, EFF, M, batch=1, context=128, cuda_graph=False)),
    "estimate_training": ("cluster", lambda: estimate_training(M, ST, cluster=math.nan,
                                                               seq=2048)),
    "search_training": ("pool", lambda: search_training(M, cluster=CL, gpus=8, global_batch=8,
                                                        seq=2048, pool=2**63)),
    "run_budget": ("acc", lambda: run_budget(tokens=1e12, tokens_per_s=1e6, gpus=8, acc=-1)),
    "simulate_step": ("stragglers", lambda: simulate_step(M, ST, cluster=CL, seq=2048,
                                                          stragglers="nope")),
    "deployment": ("fit", lambda: deployment("llama3.2-3b", "h200", fit=M)),
    "with_images": ("workload", lambda: with_images(None, images=1, image_tokens=64)),
    "simulate": ("speculator", lambda: simulate(deployment("llama3.2-3b", "h200"),
                                                SchedulerConfig(max_seqs=8), LOAD,
                                                speculator={"a": 1})),
    "plan_serving": ("space", lambda: plan(space=0)),
    "edge_estimates": ("speculation", lambda: edge_estimates("llama3.2-3b", "l4",
                                                             speculation=math.inf)),
    "simulate_cluster": ("config", lambda: simulate_cluster(False, [JOB])),
    "run_scenario": ("scenario", lambda: run_scenario(1e-300)),
    "roofline": ("ax", lambda: roofline(OPS, ACC, EFF, ax="ünïcødé")),
    "operator_points": ("ops", lambda: operator_points(1e-300, ACC, EFF)),
    "breakdown_bar": ("breakdown", lambda: breakdown_bar("ünïcødé")),
    "predicted_vs_measured": ("rows_df", lambda: predicted_vs_measured("ünïcødé")),
}  # fmt: skip

# calls that raised a bare built-in error from a value of the right kind but a wrong shape
BUILT_IN = {
    "Breakdown(items)": ("items", lambda: Breakdown(items=2.5).total_s),
    "Breakdown(memory_bytes)": ("memory_bytes", lambda: Breakdown(items=(), memory_bytes=[1])),
    "Cluster(placement)": ("placement", lambda: Cluster(**fields_of(CL, placement=0))),
    "Cluster(scaleout_efficiency)": ("scaleout_efficiency",
                                     lambda: Cluster(**fields_of(CL, scaleout_efficiency=None))),
    "Accelerator(peak_flops_per_s)": ("peak_flops_per_s",
                                      lambda: Accelerator(**fields_of(ACC, peak_flops_per_s=1.0))),
    "Accelerator(source)": ("source", lambda: Accelerator(**fields_of(ACC, source=M))),
    "kv_cache_bytes_per_token(dtype)": ("dtype", lambda: kv_cache_bytes_per_token(M, {"a": 1})),
    "layer_forward(layer)": ("layer", lambda: layer_forward(M, batch=1, seq=128, layer="nope")),
    "layer_forward(tp)": ("tp", lambda: layer_forward(M, batch=1, seq=128, tp={"a": 1})),
    "decode_step_breakdown(impl)": ("impl", lambda: decode_step_breakdown(
        ACC, EFF, M, batch=1, context=128, cuda_graph=False, impl="nope")),
    "decode_step_breakdown(extra_ops)": ("extra_ops", lambda: decode_step_breakdown(
        ACC, EFF, M, batch=1, context=128, cuda_graph=False, extra_ops=-math.inf)),
    "deployment(unknown option)": ("bogus_keyword",
                                   lambda: deployment("llama3.2-3b", "h200", bogus_keyword=1)),
    "make_workload(shared_prefix)": ("shared_prefix", lambda: make_workload(
        rate_per_s=1.0, n=8, prompt_tokens=64, output_tokens=8, shared_prefix="h200")),
    "plan_serving(top)": ("top", lambda: plan(top="h200")),
    "plan_serving(rate_per_s=1e308)": ("rate_per_s", lambda: plan(rate_per_s=1e308)),
    "plan_serving(seed)": ("seed", lambda: plan(seed="llama3.2-3b")),
    "plan_serving(lengths)": ("lengths", lambda: plan(lengths=M)),
    "model_breakdown(params)": ("micro_batch", lambda: model_breakdown(
        "train_step", ACC, EFF, M, {"seq": 128})),
    "predict_breakdown(params dtype)": ("dtype", lambda: predict_breakdown(
        "gemm", "h200", GEMM | {"dtype": [1]})),
    "simulate(max_run_iterations)": ("max_run_iterations", lambda: simulate(
        deployment("llama3.2-3b", "h200"), SchedulerConfig(max_seqs=8), LOAD,
        max_run_iterations=-math.inf)),
    "simulate(watch)": ("watch", lambda: simulate(deployment("llama3.2-3b", "h200"),
                                                  SchedulerConfig(max_seqs=8), LOAD, watch="")),
    "simulate(slo_tpot_s)": ("slo_tpot_s", lambda: simulate(
        deployment("llama3.2-3b", "h200"), SchedulerConfig(max_seqs=8), LOAD,
        slo_tpot_s="ünïcødé")),
    "simulate_cluster(seed)": ("seed", lambda: simulate_cluster(
        ClusterConfig(cluster=CL, nodes=1), [JOB], seed={"a": 1})),
    "simulate_cluster(jobs)": ("jobs", lambda: simulate_cluster(
        ClusterConfig(cluster=CL, nodes=1), math.nan)),
    "simulate_cluster(no jobs)": ("jobs", lambda: simulate_cluster(
        ClusterConfig(cluster=CL, nodes=1), ())),
    "Strategy(pp_layers)": ("pp_layers", lambda: Strategy(pp_layers=-(2**63))),
    "Strategy(sp)": ("sp", lambda: Strategy(sp=math.nan).label),
    "ModelConfig(n_layers=10**30)": ("n_layers",
                                     lambda: dataclasses.replace(M, n_layers=10**30).layer_kinds),
    "ModelConfig(kv_lora_rank)": ("kv_lora_rank",
                                  lambda: dataclasses.replace(M, kv_lora_rank=None)),
    "simulate_step(gather_prefetch)": ("gather_prefetch", lambda: simulate_step(
        M, ST, cluster=CL, seq=2048, gather_prefetch=CL)),
    "edge_estimates(batches)": ("batches",
                                lambda: edge_estimates("llama3.2-3b", "l4", batches=None)),
}  # fmt: skip

# calls that returned NaN, an infinite or a negative size or duration, or took a NaN switch
NONSENSE = {
    "layer_forward(seq=inf)": ("seq", lambda: layer_forward(M, batch=1, seq=math.inf)),
    "model_forward(batch=-2**63)": ("batch", lambda: model_forward(M, batch=-(2**63), seq=128)),
    "training_flops(seq=-inf)": ("seq", lambda: training_flops(M, batch=1, seq=-math.inf)),
    "layer_activation_bytes(tokens=-1)": ("tokens",
                                          lambda: layer_activation_bytes(M, tokens=-1)),
    "layer_activation_bytes(tp=-1)": ("tp", lambda: layer_activation_bytes(M, tokens=128, tp=-1)),
    "training_state_bytes(inf)": ("num_params", lambda: training_state_bytes(math.inf)),
    "Efficiency(attn_fixed_s=-inf)": ("attn_fixed_s",
                                      lambda: Efficiency(**fields_of(EFF, attn_fixed_s=-math.inf))),
    "Efficiency(table entry nan)": ("gelu", lambda: Efficiency(**fields_of(
        EFF, elementwise_hbm_fraction=EFF.elementwise_hbm_fraction | {"gelu": math.nan}))),
    "Accelerator(notes=nan)": ("notes", lambda: Accelerator(**fields_of(ACC, notes=math.nan))),
    "ModelConfig(causal=nan)": ("causal", lambda: dataclasses.replace(M, causal=math.nan)),
    "ModelConfig(n_channels=nan)": ("n_channels",
                                    lambda: dataclasses.replace(M, n_channels=math.nan)),
    "Strategy(overlap_tp=nan)": ("overlap_tp", lambda: Strategy(overlap_tp=math.nan)),
    "simulate_step(all_ranks=nan)": ("all_ranks", lambda: simulate_step(
        M, ST, cluster=CL, seq=2048, all_ranks=math.nan)),
    "run_budget(tokens_per_s=1e-300)": ("tokens_per_s", lambda: run_budget(
        tokens=1e12, tokens_per_s=1e-300, gpus=8, acc=ACC)),
    "decode_step_breakdown(extra_host_s=inf)": ("extra_host_s", lambda: decode_step_breakdown(
        ACC, EFF, M, batch=1, context=128, cuda_graph=False, extra_host_s=math.inf)),
    "layer_forward(batch=1e308)": ("batch", lambda: layer_forward(M, batch=1e308, seq=128)),
    "layer_activation_bytes(tokens=1e308)": ("tokens",
                                             lambda: layer_activation_bytes(M, tokens=1e308)),
    "training_state_bytes(1e308)": ("num_params", lambda: training_state_bytes(1e308)),
    "run_budget(pue=1e308)": ("pue", lambda: run_budget(tokens=1e12, tokens_per_s=1e6, gpus=8,
                                                        acc=ACC, pue=1e308)),
    "plan_serving(usd_per_gpu_hour=1e308)": ("price_per_gpu_hour",
                                             lambda: plan(usd_per_gpu_hour=1e308)),
    "Images(count=2.5)": ("images", lambda: Images(count=2.5, width=224, height=224)),
}  # fmt: skip

# calls whose GpuplanError printed a whole object (pages of repr) instead of naming it
LONG = {
    "Images(width=ModelConfig)": lambda: Images(count=1, width=M, height=224),
    "Strategy(zero=Accelerator)": lambda: Strategy(zero=ACC),
    "estimate_training(stack=Cluster)": lambda: estimate_training(M, ST, cluster=CL, seq=2048,
                                                                  stack=CL),
    "make_workload(prompt_tokens=ModelConfig)": lambda: make_workload(
        rate_per_s=1.0, n=8, prompt_tokens=M, output_tokens=8),
    "ModelConfig(layer_types=ModelConfig)": lambda: dataclasses.replace(M, layer_types=M),
    "ModelConfig(name=Accelerator)": lambda: dataclasses.replace(M, name=ACC, linear_attention=True),
    "Accelerator(pcie_bytes_per_s=Accelerator)": lambda: Accelerator(
        **fields_of(ACC, pcie_bytes_per_s=ACC)),
}  # fmt: skip


def _named_one_line_error(call, field):
    with pytest.raises(GpuplanError) as err:
        call()
    text = str(err.value)
    assert field in text and "\n" not in text and len(text) < 600, text


@pytest.mark.parametrize("name", sorted(WRONG_KIND))
def test_an_object_of_the_wrong_kind_is_a_named_error(name):
    _named_one_line_error(WRONG_KIND[name][1], WRONG_KIND[name][0])


@pytest.mark.parametrize("name", sorted(BUILT_IN))
def test_a_value_of_the_wrong_shape_is_a_named_error_not_a_built_in_one(name):
    _named_one_line_error(BUILT_IN[name][1], BUILT_IN[name][0])


@pytest.mark.parametrize("name", sorted(NONSENSE))
def test_a_value_that_priced_nonsense_is_refused(name):
    _named_one_line_error(NONSENSE[name][1], NONSENSE[name][0])


@pytest.mark.parametrize("name", sorted(LONG))
def test_an_error_shows_an_object_by_its_name_not_its_repr(name):
    with pytest.raises(GpuplanError) as err:
        LONG[name]()
    assert len(str(err.value)) < 300 and "\n" not in str(err.value), str(err.value)


def test_a_text_workload_has_no_images_per_request():
    assert LOAD.images_per_request.tolist() == [0] * LOAD.n


def test_a_duck_typed_object_that_works_keeps_working():
    """``expects`` checks kinds only after a failure: an object of another class that does the
    job (a proxy of the accelerator) is priced as the accelerator is, not refused."""

    class Proxy:
        def __getattr__(self, name):
            return getattr(ACC, name)

    assert price(OPS[0], Proxy(), EFF).total_s == price(OPS[0], ACC, EFF).total_s
