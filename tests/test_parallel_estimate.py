"""Layer 2 estimate: the breakdown adds up, physics' monotonic properties, the pipeline bubble,
hierarchical collectives, memory per ZeRO stage, and the errors a user can meet."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.collectives import collective_time
from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.sim.parallel import collectives as co
from gpuplan.sim.parallel.compute import CostCache
from gpuplan.sim.parallel.cost import run_budget
from gpuplan.sim.parallel.estimate import estimate_training
from gpuplan.sim.parallel.step_time import step_terms, step_total
from gpuplan.sim.parallel.strategy import Strategy
from gpuplan.sim.parallel.topology import cluster_for, get_cluster, span, spans, with_placement
from gpuplan.workloads.presets import get_model

LLAMA8 = get_model("llama3-8b")
MIXTRAL = get_model("mixtral-8x7b")
H100 = get_cluster("dgx-h100")
A100 = get_cluster("dgx-a100")
EFF = efficiency_for("h100-sxm")
COSTS = CostCache(LLAMA8, H100.accelerator, EFF)


def estimate(strategy, cfg=LLAMA8, cluster=H100, seq=4096):
    costs = COSTS if cfg is LLAMA8 and cluster is H100 else None
    return estimate_training(cfg, strategy, cluster=cluster, seq=seq, eff=EFF, costs=costs)


layouts = st.builds(
    Strategy,
    tp=st.sampled_from([1, 2, 4, 8]),
    pp=st.sampled_from([1, 2, 4]),
    dp=st.sampled_from([1, 2, 8]),
    cp=st.sampled_from([1, 2]),
    sp=st.booleans(),
    zero=st.sampled_from([0, 1, 2, 3]),
    micro_batch=st.sampled_from([1, 2]),
    global_batch=st.just(64),
    recompute=st.sampled_from(["none", "full"]),
    overlap_dp=st.booleans(),
    overlap_tp=st.booleans(),
)


@settings(max_examples=25, deadline=None)
@given(s=layouts)
def test_the_breakdown_items_sum_to_the_step_time(s):
    e = estimate(s)
    assert e.step_time_s == pytest.approx(sum(i.time_s for i in e.breakdown.items), rel=1e-12)
    assert e.step_time_s > 0 and 0 < e.mfu < 1 and e.mfu <= e.hfu + 1e-12


@settings(max_examples=20, deadline=None)
@given(zero=st.sampled_from([0, 1, 2, 3]), dp=st.sampled_from([1, 2, 4, 8, 16, 32, 64]))
def test_more_gpus_of_pure_data_parallelism_never_raise_memory_per_gpu(zero, dp):
    gb = 128
    small = estimate(Strategy(dp=dp, zero=zero, global_batch=gb))
    large = estimate(Strategy(dp=2 * dp, zero=zero, global_batch=gb))
    assert large.peak_memory_per_gpu_bytes <= small.peak_memory_per_gpu_bytes


def test_zero_stages_shard_optimizer_then_gradients_then_weights():
    mem = [
        estimate(Strategy(dp=8, zero=z, global_batch=8)).breakdown.memory_bytes for z in range(4)
    ]
    assert mem[1]["optimizer"] == pytest.approx(mem[0]["optimizer"] / 8)
    assert mem[2]["gradients"] == pytest.approx(mem[0]["gradients"] / 8)
    assert mem[3]["weights"] == pytest.approx(mem[0]["weights"] / 8)
    assert mem[1]["gradients"] == mem[0]["gradients"] and mem[2]["weights"] == mem[0]["weights"]


def test_the_1f1b_bubble_is_p_minus_1_over_m_plus_p_minus_1_for_balanced_stages():
    p, m, stage_s = 8, 24, 0.5
    c = {"stage_fwd": stage_s / 3, "stage_bwd": 2 * stage_s / 3, "recompute": 0.0,
         "gemm_layer": 0.0, "attn_layer": 0.0, "moe_layer": 0.0}  # fmt: skip
    terms = _balanced_terms(c, pp=p, m=m, chunks=1)
    pipeline = terms["bubble"] + terms["compute_fwd"] + terms["compute_bwd"]
    assert terms["bubble"] / pipeline == pytest.approx((p - 1) / (m + p - 1))
    interleaved = _balanced_terms(c, pp=p, m=m, chunks=4)
    assert interleaved["bubble"] == pytest.approx(terms["bubble"] / 4)


def _balanced_terms(c, *, pp, m, chunks):
    one = np.asarray(1)
    s = {"tp": one, "pp": np.asarray(pp), "dp": one, "cp": one, "ep": one, "rc": np.asarray(0),
         "m": np.asarray(m), "chunks": np.asarray(chunks), "zero": np.asarray(0),
         "sp": np.asarray(False), "overlap_tp": False, "overlap_dp": True, "overlap_pp": True,
         "overlap_ep": False,
         "fused_accum": True, "tied": False}  # fmt: skip
    sp_ = spans(H100, 1, 1, 1, pp, 1)
    nbytes = {"act": 1e6, "kv": 1e5, "dispatch": 0.0}
    params = {"stage": 1e9, "max_stage": 1e9, "embedding": 1e8, "optimizer_s": 0.0,
              "accumulate_s": 0.0}  # fmt: skip
    from gpuplan.sim.parallel.collectives import links
    from gpuplan.sim.parallel.stage import stage_kinds

    kinds = stage_kinds((False,) * 4 * pp, (4,) * pp)  # balanced: every kind costs c
    c = {k: np.full(len(kinds.count), v) if k.startswith(("stage", "rec")) else v
         for k, v in c.items()}  # fmt: skip
    return step_terms(lk=links(H100, EFF), sp_=sp_, s=s, c=c, k=kinds, bytes_=nbytes,
                      params=params)  # fmt: skip


def test_a_deep_pipeline_with_few_micro_batches_shows_its_bubble_in_the_estimate():
    cfg = replace(LLAMA8, vocab_size=256)  # ends almost free: stages nearly balanced
    e = estimate_training(cfg, Strategy(pp=8, global_batch=8), cluster=H100, seq=4096, eff=EFF)
    bubble = sum(i.time_s for i in e.breakdown.items if i.category == "bubble")
    assert bubble / e.step_time_s == pytest.approx(7 / 15, rel=0.05)


def test_the_interleaved_schedule_has_a_smaller_bubble_than_1f1b():
    plain = estimate(Strategy(pp=4, global_batch=8))
    inter = estimate(Strategy(pp=4, global_batch=8, schedule="interleaved", virtual_stages=4))
    assert inter.step_time_s < plain.step_time_s


def test_full_recomputation_trades_time_for_memory():
    none = estimate(Strategy(tp=2, dp=4, global_batch=8))
    full = estimate(Strategy(tp=2, dp=4, global_batch=8, recompute="full"))
    assert full.step_time_s > none.step_time_s
    assert full.peak_memory_per_gpu_bytes < none.peak_memory_per_gpu_bytes


def test_sequence_parallelism_saves_activation_memory():
    plain = estimate(Strategy(tp=8, global_batch=1)).breakdown.memory_bytes["activations"]
    seq_par = estimate(Strategy(tp=8, sp=True, global_batch=1)).breakdown.memory_bytes
    assert seq_par["activations"] < plain


def test_an_invalid_layout_is_an_error_not_a_number():
    with pytest.raises(GpuplanError, match="tp=3"):
        estimate(Strategy(tp=3, global_batch=1))
    with pytest.raises(GpuplanError, match="is not the world size"):
        estimate_training(LLAMA8, Strategy(dp=4, global_batch=4), cluster=H100, seq=4096, gpus=8)


def test_fp8_on_a_gpu_without_fp8_is_an_error():
    with pytest.raises(GpuplanError, match="precision='fp8' is not supported by a100"):
        estimate(Strategy(precision="fp8"), cluster=A100)


def test_expert_parallelism_adds_all_to_all_and_divides_expert_memory():
    cfg = MIXTRAL
    one = estimate_training(cfg, Strategy(tp=2, dp=8, global_batch=8), cluster=H100, seq=4096)
    ep = estimate_training(cfg, Strategy(tp=2, dp=8, ep=8, global_batch=8), cluster=H100,
                           seq=4096)  # fmt: skip
    ops = {i.op for i in ep.breakdown.items}
    assert "ep all_to_all" in ops
    assert ep.breakdown.memory_bytes["weights"] < one.breakdown.memory_bytes["weights"] / 2


def test_mfu_counts_model_flops_and_hfu_counts_recomputation():
    e = estimate(Strategy(tp=2, dp=4, global_batch=8, recompute="full"))
    assert e.hfu > e.mfu * 1.2


def test_inside_one_domain_the_collectives_equal_the_one_host_model():
    lk = co.links(H100, EFF)
    acc = H100.accelerator
    for op, fn in (
        ("all_reduce", co.all_reduce_s),
        ("all_gather", co.all_gather_s),
        ("reduce_scatter", co.reduce_scatter_s),
        ("all_to_all", co.all_to_all_s),
    ):
        for n in (1, 2, 8):
            assert float(fn(lk, n, 1, 64e6)) == pytest.approx(
                collective_time(acc, op, n, 64e6, EFF).total_s
            )


@settings(max_examples=40, deadline=None)
@given(local=st.sampled_from([1, 2, 4, 8]), nodes=st.integers(2, 512), nbytes=st.floats(1e3, 1e10))
def test_more_scale_out_bandwidth_is_never_slower(local, nodes, nbytes):
    slow = co.links(H100, EFF)
    fast = co.links(replace(H100, scaleout_bytes_per_s=4 * H100.scaleout_bytes_per_s), EFF)
    for fn in (co.all_reduce_s, co.all_gather_s, co.reduce_scatter_s, co.all_to_all_s):
        assert fn(fast, local, nodes, nbytes) <= fn(slow, local, nodes, nbytes)


def test_leaving_the_domain_costs_more_than_staying_inside():
    lk = co.links(H100, EFF)
    assert co.all_reduce_s(lk, 8, 2, 1e9) > co.all_reduce_s(lk, 8, 1, 1e9)
    assert co.send_recv_s(lk, True, 1e8) > co.send_recv_s(lk, False, 1e8)


def test_placement_puts_tp_inside_a_node_and_dp_across_nodes():
    s = spans(H100, 8, 1, 16, 4, 1)
    assert s["tp"] == (8, 1) and s["dp"] == (1, 16) and bool(s["pp_cross"])
    flipped = spans(with_placement(H100, "dp,tp,cp,pp"), 8, 1, 16, 4, 1)
    assert flipped["tp"][1] > 1  # TP now strides across domains
    assert tuple(int(x) for x in span(get_cluster("gb200-nvl72"), 64, 1)) == (64, 1)


def test_unknown_clusters_and_bad_placements_are_errors():
    with pytest.raises(GpuplanError, match="unknown cluster 'dgx-z100'"):
        get_cluster("dgx-z100")
    with pytest.raises(GpuplanError, match="placement"):
        with_placement(H100, "tp,dp")
    assert cluster_for("b200").scaleup_size == 8


def test_a_run_budget_scales_with_tokens_and_counts_energy():
    acc = H100.accelerator
    one = run_budget(tokens=1e12, tokens_per_s=1e6, gpus=1024, acc=acc)
    two = run_budget(tokens=2e12, tokens_per_s=1e6, gpus=1024, acc=acc)
    assert two.gpu_hours == pytest.approx(2 * one.gpu_hours)
    assert one.cost_usd > 0 and one.energy_kwh == pytest.approx(
        1024 * 700 * 0.8 * 1e6 * 1.1 / 3.6e6
    )
    with pytest.raises(GpuplanError, match="tokens"):
        run_budget(tokens=0, tokens_per_s=1.0, gpus=1, acc=acc)


def test_step_total_is_the_sum_of_the_named_terms():
    e = estimate(Strategy(tp=2, pp=2, dp=2, global_batch=8))
    assert e.step_time_s > 0
    c = {"stage_fwd": 1.0, "stage_bwd": 2.0, "recompute": 0.0,
         "gemm_layer": 0.0, "attn_layer": 0.0, "moe_layer": 0.0}  # fmt: skip
    terms = _balanced_terms(c, pp=1, m=5, chunks=1)
    assert float(step_total(terms)) == pytest.approx(15.0 + float(terms["optimizer"]))
