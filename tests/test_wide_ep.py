"""Wide expert parallelism with data-parallel attention (``serving.wide_ep``)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest

from gpuplan.errors import GpuplanError, Infeasible
from gpuplan.sim.runtime.serving.deployment import SchedulerConfig, deployment
from gpuplan.sim.runtime.serving.iteration import token_ops
from gpuplan.sim.runtime.serving.kv_cache import kv_capacity
from gpuplan.sim.runtime.serving.plan_space import SearchSpace, wide_ep_candidates
from gpuplan.sim.runtime.serving.step_model import Batch, StepModel, iteration_breakdown
from gpuplan.sim.runtime.serving.wide_ep import (
    FP8_GROUP,
    FP8_SCALE_BYTES,
    dp_weights_bytes,
    expert_imbalance,
)

MOE = 5  # a MoE block of DeepSeek-V3 (the first three are dense)


def _group(**kw):
    base = {"tp": 1, "ep": 32, "dp_attention": True, "weight_dtype": "fp8", "kv_dtype": "fp8"}
    return deployment("deepseek-v3", "h200", **(base | kw))


def _a2a(ops, name):
    return {op.link: op for op in ops if op.name.startswith(name)}


def test_low_latency_dispatch_bytes_cross_each_link_by_its_share():
    dep, tokens = _group(), 128
    cfg = dep.model
    ops = _a2a(token_ops(dep, tokens=tokens, layer=MOE, low_latency=True), "ep dispatch")
    value = 1 + FP8_SCALE_BYTES / FP8_GROUP  # FP8 dispatch with its scales
    copies = tokens * cfg.top_k * cfg.d_model * value
    for link, share in (("scaleup", 7 / 32), ("scaleout", 24 / 32)):
        op = ops[link]
        sent = op.bytes_per_rank * (op.world - 1) / op.world  # what an all_to_all sends
        assert sent == pytest.approx(copies * share)
    combine = _a2a(token_ops(dep, tokens=tokens, layer=MOE, low_latency=True), "ep combine")
    op = combine["scaleout"]
    assert op.bytes_per_rank * (op.world - 1) / op.world == pytest.approx(
        tokens * cfg.top_k * cfg.d_model * 2 * 24 / 32)  # BF16 combine


def test_normal_mode_sends_a_token_once_per_remote_node():
    dep, tokens = _group(), 4096
    op = _a2a(token_ops(dep, tokens=tokens, layer=MOE, low_latency=False), "ep dispatch")["scaleout"]
    nodes, k = 4, dep.model.top_k
    remote = (nodes - 1) * (1 - (1 - 1 / nodes) ** k)
    sent = op.bytes_per_rank * (op.world - 1) / op.world
    assert sent == pytest.approx(tokens * remote * dep.model.d_model * (1 + FP8_SCALE_BYTES / FP8_GROUP))
    assert remote < k  # deduplicated: fewer NIC copies than low-latency's direct sends


def test_one_node_group_uses_no_nic():
    ops = token_ops(_group(ep=8), tokens=64, layer=MOE)
    assert not [op for op in ops if getattr(op, "link", "") == "scaleout"]


def test_imbalance_raises_the_iteration_time():
    batch = Batch(decode_seqs=32 * 64, decode_kv_tokens=32 * 64 * 1000)
    times = [StepModel(_group(expert_imbalance=x)).iteration_s(batch) for x in (1.0, 1.5, 3.0)]
    assert times[0] < times[1] < times[2]


def test_default_imbalance_falls_with_batch_and_redundant_experts():
    dep = _group()
    assert expert_imbalance(dep, 64) > expert_imbalance(dep, 4096) > 1.0
    assert expert_imbalance(_group(redundant_experts=32), 64) < expert_imbalance(dep, 64)


def test_redundant_experts_add_their_memory_per_gpu():
    cfg = _group().model
    from gpuplan.workloads.params import ffn_params

    per_expert = cfg.n_moe_layers * ffn_params(cfg, cfg.d_ff_expert) * 1  # fp8: one byte
    extra = dp_weights_bytes(_group(redundant_experts=32)) - dp_weights_bytes(_group())
    assert extra == pytest.approx(32 * per_expert / 32)


def test_attention_weights_are_replicated_per_rank_and_experts_sharded():
    wide, narrow = dp_weights_bytes(_group(ep=64)), dp_weights_bytes(_group(ep=32))
    assert wide < narrow  # experts over more GPUs
    # the non-expert part is the same on every rank whatever ep: the difference is experts only
    cfg = _group().model
    from gpuplan.workloads.params import ffn_params

    experts = cfg.n_moe_layers * cfg.n_experts * ffn_params(cfg, cfg.d_ff_expert)
    assert narrow - wide == pytest.approx(experts * (1 / 32 - 1 / 64))


def test_kv_cache_per_rank_pooled_over_the_group():
    def per_rank(ep):  # per-rank limits of 64 sequences and 2048 tokens, ep ranks of them
        sched = SchedulerConfig(policy="chunked", max_seqs=64 * ep, max_batched_tokens=2048 * ep)
        cap = kv_capacity(_group(ep=ep), sched)
        assert cap.blocks % ep == 0  # every rank its own blocks, the group pools them
        return cap, cap.blocks // ep

    (wide, wide_blocks), (narrow, narrow_blocks) = per_rank(32), per_rank(16)
    # a rank's cache is what its GPU keeps after its weights: experts over 32 GPUs leave more
    freed = narrow.weights_bytes - wide.weights_bytes
    assert (wide_blocks - narrow_blocks) * wide.block_bytes == pytest.approx(freed, rel=1e-4)


def test_a_group_too_narrow_for_the_weights_says_so():
    sched = SchedulerConfig(policy="chunked", max_seqs=128, max_batched_tokens=4096)
    with pytest.raises(GpuplanError, match="wider --ep"):
        kv_capacity(_group(ep=2), sched)


def test_lockstep_busiest_rank_sets_the_time():
    dep = _group()
    step = StepModel(dep)
    lone = step.iteration_s(Batch(prefill=((4096, 0, 1),)))
    spread = step.iteration_s(Batch(prefill=((128, 0, 1),) * 32))
    assert lone > spread  # one rank holds the whole chunk; the others run dummy steps


@pytest.mark.parametrize("kw", [{}, {"two_batch_overlap": True}, {"redundant_experts": 32}])
def test_step_model_equals_breakdown(kw):
    dep = _group(**kw)
    step = StepModel(dep)
    for batch in (Batch(decode_seqs=1000, decode_kv_tokens=2_000_000),
                  Batch(prefill=((2048, 0, 1), (512, 100, 1)), decode_seqs=70,
                        decode_kv_tokens=70_000)):  # fmt: skip
        assert step.iteration_s(batch) == pytest.approx(iteration_breakdown(dep, batch).total_s)


def test_two_batch_overlap_hides_communication_of_prefill():
    batch = Batch(prefill=((4096, 0, 1),) * 32)
    plain = StepModel(_group()).iteration_s(batch)
    tbo = StepModel(_group(two_batch_overlap=True)).iteration_s(batch)
    assert tbo < plain


@pytest.mark.parametrize("kw, words", [
    ({"model": "llama3-8b"}, "dense"),
    ({"ep": 48}, "expert slots"),
    ({"tp": 2, "ep": 3}, "multiple of tp"),
    ({"ep": 1}, "multiple of tp"),
    ({"expert_imbalance": 0.5}, "[1, ep=32]"),
    ({"redundant_experts": -1}, "0 or more"),
    ({"pp": 61}, "pp=61 is invalid with dp_attention"),
])  # fmt: skip
def test_invalid_groups_are_refused_by_name(kw, words):
    kw = dict(kw)
    model = kw.pop("model", "deepseek-v3")
    base = {"tp": 1, "ep": 32, "dp_attention": True} | kw
    with pytest.raises(GpuplanError) as err:
        deployment(model, "h200", **base)
    assert words in str(err.value)


def test_companions_need_dp_attention():
    with pytest.raises(GpuplanError, match="needs dp_attention"):
        deployment("deepseek-v3", "h200", tp=8, ep=8, two_batch_overlap=True)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "gpuplan.cli", "serve", *args],
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_cli_wide_ep_runs_and_refuses_partial_groups():
    common = ["--model", "deepseek-v3", "--gpu", "h200", "--weight-dtype", "fp8", "--kv-dtype",
              "fp8", "--rate", "5", "--prompt-tokens", "500", "--output-tokens", "50",
              "--requests", "100", "--max-model-len", "8192", "--json"]  # fmt: skip
    old = _cli(*common, "--tp", "1", "--replicas", "8", "--ep", "8")
    assert old.returncode != 0 and "--dp-attention" in old.stderr
    ok = _cli(*common, "--tp", "1", "--replicas", "16", "--ep", "8", "--dp-attention")
    assert ok.returncode == 0, ok.stderr
    assert '"ep_groups": 2' in ok.stdout and '"gpus": 16' in ok.stdout
    bad = _cli(*common, "--tp", "1", "--replicas", "12", "--ep", "8", "--dp-attention")
    assert bad.returncode != 0 and "whole groups" in bad.stderr and "Traceback" not in bad.stderr


def test_plan_offers_wide_ep_for_moe_only():
    from gpuplan.hwmodels.accelerators import get_accelerator
    from gpuplan.sim.runtime.serving.deployment import serving_efficiency
    from gpuplan.workloads.presets import get_model

    acc = get_accelerator("h200")
    eff = serving_efficiency("h200")
    space = SearchSpace(formats=(("fp8", "fp8"),), max_seqs=(64,), max_gpus=32)
    found = list(wide_ep_candidates(get_model("deepseek-v3"), acc, eff, space))
    assert {c.ep for c, _ in found} == {8, 16, 32}  # 64 > max_gpus
    assert all(c.unit_gpus == c.ep for c, _ in found)
    assert not list(wide_ep_candidates(get_model("llama3-8b"), acc, eff, space))


def test_dp_attention_holds_more_of_mla_s_cache_than_tp8_on_the_same_gpus():
    # MLA's latent is replicated on every TP rank (kv_cache module docstring); a DP rank keeps
    # only its own sequences', so 32 GPUs as one group cache far more tokens than 4 x TP8
    sched = SchedulerConfig(policy="chunked", max_seqs=256)
    tp8 = kv_capacity(deployment("deepseek-v3", "h200", tp=8, weight_dtype="fp8",
                                 kv_dtype="fp8"), sched).tokens  # fmt: skip
    wide = kv_capacity(_group(), replace(sched, max_seqs=256 * 32,
                                         max_batched_tokens=2048 * 32)).tokens  # fmt: skip
    assert wide > 4 * tp8 * 8  # 4 replicas, each caching every token on all 8 of its GPUs


def test_an_ep_that_leaves_expert_slots_over_names_the_redundant_experts_that_fit_it():
    """256 experts over EP72 (an NVL72 rack): 256 % 72 = 40, so 32 more slots make 288 = 4 x 72."""
    with pytest.raises(GpuplanError, match=r"ep=72 does not divide .* 256 expert slots; valid ep:"
                                           r" .* or keep ep=72 with --redundant-experts 32"):
        _group(ep=72)
    assert _group(ep=72, redundant_experts=32).ep == 72


def _experts(ops, name):
    return next(op for op in ops if op.name == name)


def test_grouped_experts_read_only_the_experts_a_small_decode_batch_routes_to():
    # 8 decode tokens over EP8 (32 expert slots a GPU): each token picks 8 of 256 experts, so
    # about 32 (1 - (1 - 8/256)^8) = 7.2 of a GPU's slots get a row; the others' weights are
    # not read (TensorRT-LLM's and vLLM's grouped MoE kernels skip an expert with no rows)
    dep = _group(ep=8, grouped_experts=True, expert_imbalance=1.0)
    ops = token_ops(dep, tokens=1, layer=MOE, group_tokens=8)
    gate_up = _experts(ops, "expert_gate_up_proj")
    assert gate_up.count == 7 and gate_up.m == 1  # was all 32 slots
    act = _experts(ops, "expert_silu_mul")
    assert act.count == 1 and act.tokens == 8  # one grouped activation kernel, not one per slot
    # a full decode batch reaches every slot
    full = _experts(token_ops(dep, tokens=128, layer=MOE, group_tokens=1024), "expert_down_proj")
    assert full.count == 32


def test_small_batch_expert_time_is_the_same_under_tp_or_dp_attention():
    # the same 8 tokens over the same EP8 experts read the same expert weights whether the
    # attention is TP8 or eight DP ranks (balanced routing in both)
    wide = _group(ep=8, grouped_experts=True, expert_imbalance=1.0)
    narrow = deployment("deepseek-v3", "h200", tp=8, ep=8, weight_dtype="fp8", kv_dtype="fp8",
                        grouped_experts=True)  # fmt: skip
    a = _experts(token_ops(wide, tokens=1, layer=MOE, group_tokens=8), "expert_gate_up_proj")
    b = _experts(token_ops(narrow, tokens=8, layer=MOE), "expert_gate_up_proj")
    assert (a.count, a.m, a.n, a.k) == (b.count, b.m, b.n, b.k)



def test_a_group_too_small_for_its_weights_names_a_wider_ep():
    dep = _group(ep=4)  # 671 GB of fp8 weights over 4 GPUs of 141 GB
    with pytest.raises(Infeasible, match=r"does not fit on h200 .*more GPUs \(a wider --ep\)$") as err:
        kv_capacity(dep, SchedulerConfig())
    assert err.value.fix == {}
