"""Layouts as they are run: uneven pipeline stages (the estimate, the search, the command line),
distinct layouts in the search, its precision input and the interruptions of a whole run."""

import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.cli import main
from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.sim.parallel.compute import CostCache
from gpuplan.sim.parallel.estimate import estimate_training
from gpuplan.sim.parallel.interruptions import expected_interruptions
from gpuplan.sim.parallel.memory import in_flight
from gpuplan.sim.parallel.model_facts import model_facts
from gpuplan.sim.parallel.search import SearchSpace, distinct_layouts, layout_key, search
from gpuplan.sim.parallel.stage import stage_kinds
from gpuplan.sim.parallel.strategy import Strategy, auto_pp_layers
from gpuplan.sim.parallel.topology import get_cluster
from gpuplan.sim.runtime.cluster.checkpoint import expected_waste
from gpuplan.workloads.presets import get_model

H100 = get_cluster("dgx-h100")
EFF = efficiency_for("h100-sxm")
# ends almost free (a 256-entry vocabulary): the blocks alone set the stages' times
SMALL = replace(get_model("llama3-8b"), vocab_size=256, name="llama3-8b-v256")
SMALL_COSTS = CostCache(SMALL, H100.accelerator, EFF)
LLAMA8 = get_model("llama3-8b")
LLAMA8_COSTS = CostCache(LLAMA8, H100.accelerator, EFF)


def estimate(strategy, cfg=SMALL, seq=2048):
    costs = {SMALL.name: SMALL_COSTS, LLAMA8.name: LLAMA8_COSTS}.get(cfg.name)
    return estimate_training(cfg, strategy, cluster=H100, seq=seq, eff=EFF, costs=costs)


def test_an_explicit_even_split_is_the_same_estimate_as_no_split():
    base = Strategy(tp=2, pp=4, dp=2, global_batch=32, schedule="interleaved", virtual_stages=2)
    even = estimate(base, cfg=LLAMA8)
    listed = estimate(replace(base, pp_layers=(8, 8, 8, 8)), cfg=LLAMA8)
    assert listed.step_time_s == even.step_time_s
    assert listed.breakdown.memory_bytes == even.breakdown.memory_bytes


@st.composite
def splits(draw, n_layers=32):
    pp = draw(st.sampled_from([2, 4, 8]))
    cuts = sorted(draw(st.lists(st.integers(1, n_layers - 1), min_size=pp - 1,
                                max_size=pp - 1, unique=True)))  # fmt: skip
    bounds = [0, *cuts, n_layers]
    return tuple(b - a for a, b in zip(bounds, bounds[1:], strict=False))


@settings(max_examples=25, deadline=None)
@given(layers=splits())
def test_an_uneven_split_is_never_faster_than_the_even_one_when_the_ends_are_free(layers):
    pp = len(layers)
    base = Strategy(pp=pp, global_batch=4 * pp)
    even, uneven = estimate(base), estimate(replace(base, pp_layers=layers))
    blocks = [i for i in uneven.breakdown.items if i.phase in ("fwd", "bwd")]
    heaviest = sum(i.time_s for i in blocks)
    even_blocks = sum(i.time_s for i in even.breakdown.items if i.phase in ("fwd", "bwd"))
    assert heaviest >= even_blocks * (1 - 1e-12)  # the slowest stage holds >= n/p blocks
    assert uneven.step_time_s >= even.step_time_s * (1 - 1e-12)
    if max(layers) > 32 // pp:
        assert uneven.step_time_s > even.step_time_s


def test_the_slowest_stage_runs_its_own_blocks_and_ends():
    layers = (3, 5, 5, 5, 5, 5, 4)  # the auto split of 32 blocks on 7 stages
    assert auto_pp_layers(32, 7) == layers
    e = estimate(Strategy(pp=7, global_batch=14, pp_layers=layers), cfg=LLAMA8)
    ops = {i.op: i for i in e.breakdown.items}
    # Llama 3's 128k-entry LM head outweighs a block: the last stage (4 blocks + head) is slowest
    assert ops["qkv_proj"].kernels == 4 * 14 and "lm_head" in ops
    assert not any(op.startswith("embedding") for op in ops)
    small = estimate(Strategy(pp=7, global_batch=14, pp_layers=layers))
    assert {i.op: i for i in small.breakdown.items}["qkv_proj"].kernels == 5 * 14  # a middle


def test_llama3_405b_runs_16_stages_interleaved_with_the_ends_as_chunks():
    cfg = get_model("llama3.1-405b")
    layers = auto_pp_layers(126, 16)
    st_ = Strategy(tp=8, pp=16, dp=1, global_batch=16, pp_layers=layers,
                   schedule="interleaved", virtual_stages=8)  # fmt: skip
    e = estimate_training(cfg, st_, cluster=H100, seq=8192, eff=EFF)
    assert e.step_time_s > 0 and "layers:7,8," in e.strategy.label
    with pytest.raises(Exception, match="valid virtual_stages: 2, 4, 8"):
        estimate_training(cfg, replace(st_, virtual_stages=3), cluster=H100, seq=8192, eff=EFF)


def test_deepseek_v3s_61_layers_split_with_the_dense_blocks_on_the_first_stage():
    cfg = get_model("deepseek-v3")  # 61 blocks, the first 3 dense
    layers = auto_pp_layers(61, 16)
    assert layers == (2,) + (4,) * 14 + (3,) and sum(layers) == 61
    kinds = stage_kinds(model_facts(cfg).moe_flags, layers)
    first = int(np.flatnonzero(kinds.index == 0)[0])
    second = int(np.flatnonzero(kinds.index == 1)[0])
    assert kinds.moe[first] == 0 and kinds.moe[second] == 3 and kinds.emb[first]
    assert int(kinds.count.sum()) == 16


def test_in_flight_micro_batches_follow_megatrons_schedules():
    kinds = stage_kinds((False,) * 32, (4,) * 8)
    first, last = int(np.argmin(kinds.index)), int(np.argmax(kinds.index))
    one_f = in_flight(kinds, pp=8, m=32, v=1, sched=1)
    assert one_f[first] == 8 and one_f[last] == 1
    assert np.all(in_flight(kinds, pp=8, m=32, v=1, sched=0) == 32)  # GPipe keeps them all
    inter = in_flight(kinds, pp=8, m=32, v=2, sched=2)
    assert inter[first] == pytest.approx(8 * (1 + 7 / 16))  # Korthikanti et al. 2022, 4.2.3


@pytest.fixture(scope="module")
def small_search():
    return search(LLAMA8, cluster=H100, gpus=16, global_batch=32, seq=2048, eff=EFF,
                  tokens=1e10)  # fmt: skip


def test_the_top_layouts_are_distinct_and_each_is_the_fastest_of_its_kind(small_search):
    frame = small_search.frame
    top = distinct_layouts(frame, 2048)
    keys = layout_key(top, 2048)
    assert not keys.duplicated().any()
    assert len(top) == len(layout_key(frame, 2048).drop_duplicates())
    # the kept row of every layout is its fastest: no dropped row beats it
    best = frame.assign(k=layout_key(frame, 2048).astype(str).agg("|".join, axis=1))
    fastest = best.groupby("k", sort=False)["step_time_s"].min()
    assert np.allclose(np.sort(fastest.to_numpy()), np.sort(top["step_time_s"].to_numpy()))
    assert top["step_time_s"].is_monotonic_increasing


def test_layouts_that_only_trade_dp_for_cp_at_the_same_tokens_per_gpu_are_one_layout():
    import pandas as pd

    rows = pd.DataFrame({"tp": [4, 4, 4], "pp": [1, 1, 1], "pp_layers": ["", "", ""],
                         "dp": [128, 256, 128], "cp": [2, 1, 1], "ep": [1, 1, 1],
                         "micro_batch": [6, 3, 3], "schedule": ["1f1b"] * 3,
                         "recompute": ["none"] * 3, "step_time_s": [1.0, 1.1, 1.2]})  # fmt: skip
    kept = distinct_layouts(rows, 2048)
    assert list(kept["dp"]) == [128, 128] and list(kept["cp"]) == [2, 1]


def test_the_search_stays_in_bf16_unless_fp8_is_asked_for(small_search):
    assert set(small_search.frame["precision"]) == {"bf16"}
    both = search(LLAMA8, cluster=H100, gpus=8, global_batch=8, seq=2048, eff=EFF,
                  space=SearchSpace(precision=("bf16", "fp8"), zero=(1,)))  # fmt: skip
    assert set(both.frame["precision"]) == {"bf16", "fp8"}


def test_interruptions_add_the_cluster_models_waste_to_the_time_to_train(small_search):
    i = small_search.interruptions
    assert i.waste == pytest.approx(
        expected_waste(i.checkpoint_interval_s, i.checkpoint_s, i.mtbf_s, i.restart_s)
    )
    f = small_search.frame
    ratio = f["time_to_train_with_failures_s"] / f["time_to_train_s"]
    assert np.allclose(ratio, 1 / (1 - i.waste)) and (ratio > 1).all()


def test_16384_gpus_are_interrupted_every_2_8_hours_as_llama_3_was():
    # Dubey et al. 2024, sec. 3.3.4: 466 interruptions in 54 days on 16,384 H100s
    i = expected_interruptions(get_model("llama3.1-405b"), gpus=16384, gpus_per_node=8,
                               acc=H100.accelerator)  # fmt: skip
    assert i.mtbf_s / 3600 == pytest.approx(54 * 24 / 466, rel=1e-6)
    small = expected_interruptions(get_model("llama3.1-405b"), gpus=1024, gpus_per_node=8,
                                   acc=H100.accelerator)  # fmt: skip
    assert small.waste < i.waste  # fewer GPUs, fewer interruptions


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_train_takes_pp_layers_auto_and_prints_the_split_and_overlaps(capsys):
    code, out, err = run(capsys, "train", "--model", "llama3-8b", "--gpu", "h100-sxm",
                         "--gpus", "7", "--pp", "7", "--pp-layers", "auto", "--global-batch",
                         "14", "--seq", "2048", "--json")  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    assert doc["strategy"]["pp_layers"] == [3, 5, 5, 5, 5, 5, 4]
    assert doc["overlaps"] == {"dp": True, "tp": False, "pp": False, "ep": False}


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--pp-layers", "10,10,10,10"], "sums to 40 blocks but llama3-8b has n_layers=32"),
        (["--pp-layers", "8,8,8"], "has 3 stages but pp=4"),
        (["--pp-layers", "16,0,8,8"], "every stage needs a whole number of blocks"),
        (["--pp-layers", "8,x"], "is not a list of block counts"),
        (["--pp-first-last", "7,8"], "with first=7, valid last"),
        (["--pp-first-last", "7,7", "--pp-layers", "auto"], "give one"),
    ],
)
def test_a_bad_stage_split_is_a_one_line_error_with_exit_code_2(capsys, flags, message):
    code, _out, err = run(capsys, "train", "--model", "llama3-8b", "--gpus", "4", "--pp", "4",
                          "--global-batch", "16", *flags)  # fmt: skip
    assert code == 2 and message in err
    assert len([line for line in err.splitlines() if line.startswith("gpuplan")]) == 1


def test_a_pp_that_does_not_divide_the_layers_suggests_pp_layers_on_the_command_line(capsys):
    code, _out, err = run(capsys, "train", "--model", "llama3-8b", "--gpus", "7", "--pp", "7",
                          "--global-batch", "14")  # fmt: skip
    assert code == 2 and "--pp-layers" in err and "3,5,5,5,5,5,4" in err


def test_search_fp8_on_a_gpu_without_it_is_an_error(capsys):
    code, _out, err = run(capsys, "search", "train", "--model", "llama3-8b", "--gpu",
                          "a100-sxm-80gb", "--gpus", "8", "--global-batch", "8", "--precision",
                          "fp8")  # fmt: skip
    assert code == 2 and "precision='fp8' is not supported by a100-sxm-80gb" in err


def test_search_json_has_the_overlaps_distinct_layouts_and_interruptions(capsys):
    code, out, err = run(capsys, "search", "train", "--model", "llama3-8b", "--gpu", "h100-sxm",
                         "--gpus", "8", "--global-batch", "16", "--seq", "2048", "--tokens",
                         "1e10", "--top", "5", "--json")  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    assert doc["overlaps"] == {"dp": True, "tp": False, "pp": False, "ep": False}
    assert doc["precision"] == ["bf16"] and doc["distinct_layouts"] >= len(doc["top"])
    assert 0 < doc["interruptions"]["waste"] < 1
    for row in doc["top"]:
        assert row["time_to_train_with_failures_s"] > row["time_to_train_s"]


def test_context_parallelism_with_fsdp_shards_over_dp_times_cp():
    cfg = LLAMA8
    full = estimate(Strategy(dp=8, zero=0, global_batch=8), cfg=cfg, seq=8192)
    cp_fsdp = estimate(Strategy(dp=4, cp=2, zero=3, global_batch=8), cfg=cfg, seq=8192)
    dp_fsdp = estimate(Strategy(dp=8, zero=3, global_batch=8), cfg=cfg, seq=8192)
    mem = cp_fsdp.breakdown.memory_bytes
    assert mem["weights"] == pytest.approx(full.breakdown.memory_bytes["weights"] / 8)
    assert mem["weights"] == pytest.approx(dp_fsdp.breakdown.memory_bytes["weights"])
    # the sequence is split: each GPU keeps half the activations of the dp-only layout
    assert mem["activations"] < dp_fsdp.breakdown.memory_bytes["activations"]


def test_expert_all_to_all_is_paid_per_moe_block_of_the_slowest_stage():
    cfg = get_model("deepseek-v3")
    layers = auto_pp_layers(61, 16)
    st_ = Strategy(pp=16, dp=64, ep=64, zero=1, global_batch=64 * 16, pp_layers=layers)
    e = estimate_training(cfg, st_, cluster=H100, seq=4096, eff=EFF)
    a2a = next(i.time_s for i in e.breakdown.items if i.op == "ep all_to_all")
    heavier = replace(st_, pp_layers=(2,) + (4,) * 13 + (5, 2))  # a 5-block stage is slowest
    e5 = estimate_training(cfg, heavier, cluster=H100, seq=4096, eff=EFF)
    a2a_5 = next(i.time_s for i in e5.breakdown.items if i.op == "ep all_to_all")
    assert a2a > 0 and a2a_5 / a2a == pytest.approx(5 / 4)
    one_node = estimate_training(cfg, replace(st_, ep=8), cluster=H100, seq=4096, eff=EFF)
    a2a_8 = next(i.time_s for i in one_node.breakdown.items if i.op == "ep all_to_all")
    assert a2a > a2a_8  # 64 experts' GPUs span 8 nodes: the dispatch crosses the NICs


def test_overlapping_the_expert_all_to_all_hides_at_most_an_moe_blocks_compute():
    cfg = get_model("deepseek-v3")
    st_ = Strategy(dp=64, ep=64, zero=1, global_batch=64)  # one stage: it stays the slowest
    plain = estimate_training(cfg, st_, cluster=H100, seq=4096, eff=EFF)
    hidden = estimate_training(cfg, replace(st_, overlap_ep=True), cluster=H100, seq=4096,
                               eff=EFF)  # fmt: skip

    def a2a(e):
        return sum(i.time_s for i in e.breakdown.items if i.op == "ep all_to_all")

    moe_compute = sum(i.time_s for i in plain.breakdown.items if i.phase in ("fwd", "bwd"))
    assert a2a(hidden) < a2a(plain)
    assert a2a(plain) - a2a(hidden) <= moe_compute * (1 + 1e-9)  # hides behind compute only
    assert hidden.step_time_s < plain.step_time_s
    assert any("overlap_ep" in n for n in hidden.notes)


def test_kernels_shared_between_shapes_are_priced_once_with_the_same_result():
    from gpuplan.sim.parallel.compute import micro_batch_costs
    from gpuplan.sim.parallel.shape import Shape
    from gpuplan.sim.parallel.stage import shape_times

    cfg = get_model("mixtral-8x7b")
    cache = CostCache(cfg, H100.accelerator, EFF)
    shapes = [Shape(micro_batch=1, seq=2048, tp=2, ep=ep, sp=sp) for ep in (1, 2, 4, 8)
              for sp in (False, True)]  # fmt: skip
    for shape in shapes:
        alone = micro_batch_costs(cfg, shape, H100.accelerator, EFF)
        assert shape_times(cache(shape)) == shape_times(alone)
        assert cache(shape).moe.fwd == alone.moe.fwd
    assert len(cache._kernels) < sum(
        len(c.fwd) + len(c.bwd)
        for s in shapes
        for c in (cache(s).dense, cache(s).moe, cache(s).head, cache(s).embedding)
        if c is not None
    )


def test_train_with_tokens_prints_the_time_to_train_with_and_without_interruptions(capsys):
    code, out, err = run(capsys, "train", "--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus",
                         "64", "--tp", "2", "--global-batch", "64", "--seq", "2048", "--tokens",
                         "1e12", "--json")  # fmt: skip
    assert code == 0, err
    b = json.loads(out)["budget"]
    waste = b["interruptions"]["waste"]
    assert b["time_to_train_with_failures_s"] == pytest.approx(b["time_to_train_s"] / (1 - waste))
    assert 0 < waste < 1


def test_memory_is_the_heaviest_stages_blocks_times_its_micro_batches_in_flight():
    base = Strategy(pp=4, global_batch=16)  # 1F1B, 16 micro-batches: stage i holds 4 - i
    even = estimate(base).breakdown.memory_bytes["activations"]  # 8 blocks x 4 in flight
    # 6,10,8,8: the first stage holds 6 x 4 = 24 block-micro-batches, the second 10 x 3 = 30
    second = estimate(replace(base, pp_layers=(6, 10, 8, 8))).breakdown.memory_bytes
    assert second["activations"] == pytest.approx(even * 30 / 32)
    first = estimate(replace(base, pp_layers=(9, 9, 7, 7))).breakdown.memory_bytes
    assert first["activations"] == pytest.approx(even * 36 / 32)  # 9 x 4 beats 9 x 3


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(0, 5)),
                     min_size=1, max_size=30))  # fmt: skip
def test_the_pareto_front_is_exactly_the_rows_no_other_row_dominates(rows):
    import pandas as pd

    from gpuplan.sim.parallel.search import pareto_front

    cols = ("step_time_s", "peak_memory_per_gpu_bytes", "cost_per_step_usd")
    frame = pd.DataFrame(rows, columns=cols).astype(float)
    front = pareto_front(frame)
    values = frame.to_numpy()
    undominated = {
        tuple(v) for i, v in enumerate(values)
        if not any(np.all(w <= v) and np.any(w < v) for j, w in enumerate(values) if j != i)
    }  # fmt: skip
    assert {tuple(v) for v in front.to_numpy()} == undominated
