"""Training stacks: each preset's choices, the layouts it refuses, the mechanisms its runtime adds
(op-level SAC, fp32 reductions, last-bucket tails, per-matrix ZeRO-3 gathers, fp8 casts), and the
search agreeing with the scalar estimate on a non-default stack."""

from dataclasses import replace

import numpy as np
import pytest

from gpuplan.errors import GpuplanError
from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.sim.parallel.compute import CostCache
from gpuplan.sim.parallel.estimate import estimate_training, stack_strategy, training_efficiency
from gpuplan.sim.parallel.fp8 import CAST_BYTES
from gpuplan.sim.parallel.search import SearchSpace, row_strategy, search
from gpuplan.sim.parallel.strategy import Strategy
from gpuplan.sim.parallel.topology import get_cluster
from gpuplan.sim.stacks import get_stack
from gpuplan.sim.stacks.training import (
    PYTORCH_RUNTIME,
    check_layout,
    layout_mask,
    runtime_of,
)
from gpuplan.units import MiB
from gpuplan.workloads.presets import get_model

H100 = get_cluster("dgx-h100")
EFF = efficiency_for("h100-sxm")
LLAMA8 = get_model("llama3-8b")


def est(st, stack, cfg=LLAMA8, seq=4096):
    st = stack_strategy(st, stack)
    return estimate_training(cfg, st, cluster=H100, seq=seq, eff=EFF, stack=stack)


def items(e):
    out: dict[str, float] = {}
    for i in e.breakdown.items:
        out[i.op] = out.get(i.op, 0.0) + i.time_s
    return out


def test_each_training_preset_states_its_framework_choices():
    fsdp2, composer, ds, mega = (get_stack(n) for n in
                                 ("fsdp2", "composer-fsdp", "deepspeed", "megatron-te"))  # fmt: skip
    assert runtime_of(fsdp2).grad_reduce_bytes == 4  # reduce_dtype=float32
    assert runtime_of(fsdp2).selective == "op-sac" and fsdp2.elementwise == "eager"
    assert fsdp2.optimizer == "fused" and fsdp2.mixed_precision == "autocast"
    assert runtime_of(composer).grad_reduce_bytes == 2  # mixed_precision PURE
    assert composer.attention.train == "flash2" and runtime_of(composer).pipeline is False
    assert runtime_of(ds).max_zero_with_pp == 1 and runtime_of(ds).gathers_per_block == 7
    assert ds.overlap_dp is False and runtime_of(ds).bucket_bytes == 5e8 * 2
    assert runtime_of(mega).grad_reduce_bytes == 4 and mega.elementwise == "fused"
    assert runtime_of(get_stack("pytorch")) is PYTORCH_RUNTIME
    assert PYTORCH_RUNTIME.bucket_bytes == 25 * MiB
    for stack in (fsdp2, composer, ds, mega):
        assert stack.sources and stack.training is not None


@pytest.mark.parametrize(
    "stack, st, message",
    [
        ("deepspeed", Strategy(pp=2, dp=4, zero=3, global_batch=8),
         "cannot run zero=3 with pp=2: with pipeline parallelism it runs zero 0 to 1"),
        ("deepspeed", Strategy(pp=2, dp=4, zero=2, global_batch=8), "use zero<=1"),
        ("composer-fsdp", Strategy(tp=2, dp=4, zero=3, global_batch=8),
         "cannot run tp=2: it has no tensor parallelism"),
        ("composer-fsdp", Strategy(pp=2, dp=4, zero=3, global_batch=8),
         "cannot run pp=2: it has no pipeline parallelism"),
        ("fsdp2", Strategy(dp=8, zero=1, global_batch=8), "cannot run zero=1: it runs zero 0, 2, 3"),
        ("composer-fsdp", Strategy(cp=2, dp=4, zero=3, global_batch=8),
         "cannot run cp=2: it has no context parallelism"),
    ],
)  # fmt: skip
def test_a_layout_the_stack_cannot_run_is_one_line_saying_what_would(stack, st, message):
    with pytest.raises(GpuplanError, match=message.replace("(", r"\(")) as err:
        est(st, stack)
    assert "\n" not in str(err.value)
    with pytest.raises(GpuplanError):
        check_layout(get_stack(stack), st)


def test_the_vectorized_layout_rule_matches_the_scalar_one():
    rt = runtime_of(get_stack("deepspeed"))
    tp, pp, zero = np.array([1, 1, 2, 1]), np.array([1, 2, 2, 4]), np.array([3, 3, 1, 0])
    assert layout_mask(rt, tp, pp, zero).tolist() == [True, False, True, True]
    composer = runtime_of(get_stack("composer-fsdp"))
    assert layout_mask(composer, [1, 1], [1, 1], [3, 3], [1, 2]).tolist() == [True, False]


def test_op_level_sac_recomputes_half_the_matmuls_and_more_than_the_attention_core():
    st = Strategy(dp=8, zero=3, global_batch=8, recompute="selective")
    fsdp2 = get_stack("fsdp2")
    core = replace(fsdp2, training=replace(runtime_of(fsdp2), selective="attention-core"))
    sac, att = est(st, fsdp2), est(st, core)
    rec = sum(i.time_s for i in sac.breakdown.items if i.phase == "recompute")
    rec_gemm = sum(i.flops for i in sac.breakdown.items
                   if i.phase == "recompute" and i.category == "gemm")  # fmt: skip
    fwd_gemm = sum(i.flops for i in sac.breakdown.items
                   if i.phase == "fwd" and i.category == "gemm" and "lm_head" not in i.op)  # fmt: skip
    assert rec > 0 and rec_gemm == pytest.approx(fwd_gemm / 2, rel=1e-6)
    assert sac.step_time_s > att.step_time_s
    assert sac.hardware_flops_per_step > att.hardware_flops_per_step


def test_fp32_gradient_reduction_costs_more_wire_time_than_bf16():
    st = Strategy(dp=8, zero=3, global_batch=8, overlap_dp=False)
    fsdp2 = get_stack("fsdp2")
    bf16 = replace(fsdp2, training=replace(runtime_of(fsdp2), grad_reduce_bytes=2))
    z32 = items(estimate_training(LLAMA8, st, cluster=H100, seq=4096, eff=EFF, stack=fsdp2))
    z16 = items(estimate_training(LLAMA8, st, cluster=H100, seq=4096, eff=EFF, stack=bf16))
    assert z32["zero gathers/reduce-scatters"] > z16["zero gathers/reduce-scatters"]


def test_the_last_gradient_bucket_shows_even_with_overlap():
    st = Strategy(dp=16, zero=0, global_batch=16)
    big = get_stack("pytorch")
    huge = replace(big, training=replace(PYTORCH_RUNTIME, bucket_bytes=1e15))
    small = items(est(st, big)).get("dp gradient reduction", 0.0)
    whole = items(est(st, huge))["dp gradient reduction"]
    assert 0 < small < whole  # one 25 MB bucket is exposed; a single bucket exposes it all


def test_deepspeed_zero3_per_matrix_gathers_pay_a_latency_each_and_slow_with_scale():
    cfg = get_model("llama2-13b")
    ds = get_stack("deepspeed")
    per_block = replace(ds, training=replace(runtime_of(ds), gathers_per_block=1))

    def zero_s(stack, gpus):
        st = Strategy(dp=gpus, zero=3, global_batch=gpus, overlap_dp=False)
        e = estimate_training(cfg, st, cluster=H100, seq=2048, eff=EFF, stack=stack)
        return items(e)["zero gathers/reduce-scatters"]

    ratio = [zero_s(ds, n) / zero_s(per_block, n) for n in (16, 512)]
    assert ratio[0] > 1 and ratio[1] > ratio[0]  # latency-bound calls weigh more at scale


def test_fp8_casts_cost_most_eager_least_fused_and_nothing_in_bf16():
    assert CAST_BYTES["eager"]["x"] > CAST_BYTES["compiled"]["x"] > 0
    assert CAST_BYTES["fused"]["w"] == 0
    st = Strategy(dp=8, zero=3, global_batch=8, precision="fp8")
    cast = {}
    for name in ("fsdp2", "megatron-te"):
        e = est(st, name)
        cast[name] = sum(i.time_s for i in e.breakdown.items if i.op.startswith("fp8_cast"))
    assert cast["fsdp2"] > cast["megatron-te"] > 0
    bf16 = est(replace(st, precision="bf16"), "fsdp2")
    assert not any(i.op.startswith("fp8_cast") for i in bf16.breakdown.items)


def test_interference_is_free_at_zero_and_costs_only_where_communication_hides():
    st = Strategy(tp=8, dp=1, global_batch=1, overlap_tp=True)
    mega = get_stack("megatron-te")
    shared = replace(mega, training=replace(runtime_of(mega), comm_interference=0.5))
    base = estimate_training(LLAMA8, st, cluster=H100, seq=4096, eff=EFF, stack=mega)
    slowed = estimate_training(LLAMA8, st, cluster=H100, seq=4096, eff=EFF, stack=shared)
    assert slowed.step_time_s > base.step_time_s
    off = replace(st, overlap_tp=False)
    a = estimate_training(LLAMA8, off, cluster=H100, seq=4096, eff=EFF, stack=mega)
    b = estimate_training(LLAMA8, off, cluster=H100, seq=4096, eff=EFF, stack=shared)
    assert a.step_time_s == pytest.approx(b.step_time_s, rel=1e-12)


@pytest.mark.parametrize("stack", ["fsdp2", "deepspeed", "composer-fsdp"])
def test_the_search_equals_the_scalar_estimate_on_a_training_stack(stack):
    cfg = get_model("llama2-7b")
    s = get_stack(stack)
    space = SearchSpace(stack=stack, overlap_dp=s.overlap_dp, state_precision="bf16-mixed"
                        if s.mixed_precision == "autocast" else "bf16-mixed-megatron")  # fmt: skip
    result = search(cfg, cluster=H100, gpus=16, global_batch=32, seq=2048, space=space, eff=EFF)
    frame = result.frame
    assert layout_mask(runtime_of(s), frame["tp"], frame["pp"], frame["zero"], frame["cp"]).all()
    costs = CostCache(cfg, H100.accelerator, training_efficiency(s, EFF, H100.accelerator),
                      s.elementwise)  # fmt: skip
    rng = np.random.default_rng(0)
    for i in rng.choice(len(frame), size=min(15, len(frame)), replace=False):
        row = frame.iloc[i]
        st = row_strategy(row, global_batch=32, space=space)
        e = estimate_training(cfg, st, cluster=H100, seq=2048, eff=EFF, costs=costs, stack=s)
        assert e.step_time_s == pytest.approx(row["step_time_s"], rel=1e-9)
        assert e.peak_memory_per_gpu_bytes == pytest.approx(row["peak_memory_per_gpu_bytes"],
                                                            rel=1e-9)  # fmt: skip


def test_op_level_sac_keeps_only_its_saved_ops_between_the_attention_core_and_full():
    st = Strategy(dp=8, zero=3, global_batch=8, recompute="selective")
    fsdp2 = get_stack("fsdp2")
    core = replace(fsdp2, training=replace(runtime_of(fsdp2), selective="attention-core"))
    acts = {name: e.breakdown.memory_bytes["activations"] for name, e in (
        ("sac", est(st, fsdp2)), ("core", est(st, core)),
        ("full", est(replace(st, recompute="full"), fsdp2)))}  # fmt: skip
    assert acts["full"] < acts["sac"] < acts["core"]
    # wq, wv, w1, w2 and SDPA's outputs plus the block input, per token, 16-bit
    h, kv, ffn = 4096, 1024, 14336
    per_token = (2 * h + h + kv + ffn + h) * 2 + 4 * 32
    blocks = acts["sac"] - acts["full"]  # the same working block on top of both
    assert blocks == pytest.approx(32 * 4096 * (per_token - h * 2), rel=1e-9)


def _bloom_like(**kw):
    """A small GPT with pipeline, TP and DP on the DeepSpeed stack (BLOOM's stack and layout)."""
    cfg = get_model("llama2-7b")
    st = Strategy(tp=2, pp=2, dp=2, zero=1, global_batch=16, micro_batch=1, recompute="full")
    st = replace(stack_strategy(st, "deepspeed"), **kw)
    return cfg, st


def test_deepspeed_bf16_optimizer_keeps_a_whole_fp32_gradient_and_all_reduces_it():
    cfg, mega = _bloom_like()
    _, bf16 = _bloom_like(state_precision="bf16-deepspeed")
    a = estimate_training(cfg, mega, cluster=H100, seq=2048, eff=EFF, stack="deepspeed")
    b = estimate_training(cfg, bf16, cluster=H100, seq=2048, eff=EFF, stack="deepspeed")
    ga, gb = a.breakdown.memory_bytes["gradients"], b.breakdown.memory_bytes["gradients"]
    assert gb == pytest.approx(ga * 6 / 4)  # bf16 .grad + fp32 buffer vs Megatron's fp32 main grad
    ia, ib = items(a), items(b)
    # a reduce-scatter of bf16 gradients vs an all-reduce of fp32 ones: more than twice the time
    assert ib["dp gradient reduction"] > 2 * ia["dp gradient reduction"]
    # update_hp_grads after every micro-batch, though Strategy's default fuses accumulation
    assert mega.fused_grad_accumulation and ib.get("gradient accumulation", 0.0) > 0.0
    assert ia.get("gradient accumulation", 0.0) == 0.0
    assert b.step_time_s > a.step_time_s
    # as first written (BLOOM's 2022 branch) it kept the whole fp32 master beside the bf16 weights
    _, old = _bloom_like(state_precision="bf16-deepspeed-2022")
    c = estimate_training(cfg, old, cluster=H100, seq=2048, eff=EFF, stack="deepspeed")
    mb, mc = b.breakdown.memory_bytes, c.breakdown.memory_bytes
    assert mc["weights"] == pytest.approx(3 * mb["weights"])  # 2 + 4 whole vs 2
    assert mc["optimizer"] == pytest.approx(mb["optimizer"] * 8 / 12)  # moments only, sharded
    assert c.step_time_s == pytest.approx(b.step_time_s, rel=1e-12)  # the same work


def test_deepspeed_pipeline_sends_block_one_by_one_and_launch_blocking_exposes_the_host():
    cfg, st = _bloom_like()
    ds = get_stack("deepspeed")
    paired = replace(ds, training=replace(runtime_of(ds), pp_transfers=2))
    blocking = replace(ds, training=replace(runtime_of(ds), launch_blocking=True))
    run = {name: estimate_training(cfg, st, cluster=H100, seq=2048, eff=EFF, stack=s)
           for name, s in (("ds", ds), ("paired", paired), ("blocking", blocking))}  # fmt: skip
    pp = {k: items(v)["pp send/recv"] for k, v in run.items()}
    assert pp["ds"] == pytest.approx(2 * pp["paired"])
    host = {k: items(v).get("host issue time not hidden", 0.0) for k, v in run.items()}
    assert run["blocking"].step_time_s > run["ds"].step_time_s
    assert host["blocking"] > host["ds"]  # the issue time no longer hides behind the kernels
    with pytest.raises(GpuplanError, match="pp_transfers=3 is invalid"):
        replace(runtime_of(ds), pp_transfers=3)


def test_fsdp2_under_pp_keeps_blocks_whole_and_reduces_once_a_step():
    fsdp2 = get_stack("fsdp2")
    st = stack_strategy(Strategy(pp=2, dp=4, zero=3, global_batch=32, micro_batch=1), fsdp2)
    st = replace(st, overlap_dp=False)  # the communication shows
    whole = estimate_training(LLAMA8, st, cluster=H100, seq=4096, eff=EFF, stack=fsdp2)
    off = replace(fsdp2, training=replace(runtime_of(fsdp2), pp_unsharded=False))
    sharded = estimate_training(LLAMA8, st, cluster=H100, seq=4096, eff=EFF, stack=off)
    iw, isd = items(whole), items(sharded)
    assert isd["zero gathers/reduce-scatters"] > 0  # per block, per micro-batch
    assert iw.get("zero gathers/reduce-scatters", 0.0) == 0.0  # once a step instead:
    assert iw["dp gradient reduction"] > 0 and iw["dp parameter all_gather"] > 0
    assert iw["gradient accumulation"] > 0  # fp32 gradients added up between reductions
    mw, ms = whole.breakdown.memory_bytes, sharded.breakdown.memory_bytes
    assert mw["gradients"] > 4 * ms["gradients"] and mw["weights"] > 2 * ms["weights"]
    z2 = estimate_training(LLAMA8, replace(st, zero=2), cluster=H100, seq=4096, eff=EFF,
                           stack=fsdp2)  # fmt: skip
    assert z2.step_time_s == pytest.approx(whole.step_time_s, rel=1e-12)
    no_pp = estimate_training(LLAMA8, replace(st, pp=1, dp=8), cluster=H100, seq=4096, eff=EFF,
                              stack=fsdp2)  # fmt: skip
    assert items(no_pp)["zero gathers/reduce-scatters"] > 0  # without PP it reshards
