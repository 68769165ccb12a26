"""The step timeline against the closed-form estimate where its assumptions hold, and what only
the timeline shows: stragglers, jitter, shared links, unbalanced end stages."""

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.sim.parallel import Strategy, estimate_training, get_cluster
from gpuplan.sim.parallel.topology import with_placement
from gpuplan.sim.runtime.timeline import Straggler, simulate_step
from gpuplan.sim.runtime.timeline.links import Link
from gpuplan.workloads.presets import get_model

H100 = get_cluster("dgx-h100")
SEQ = 4096


@pytest.fixture(scope="module")
def llama7b():
    return get_model("llama2-7b")


@pytest.mark.parametrize(
    "model,kw",
    [
        ("llama2-7b", dict(tp=2, pp=4, dp=2, global_batch=32)),
        ("llama2-7b", dict(tp=2, pp=4, dp=2, global_batch=32, schedule="gpipe")),
        (
            "llama2-7b",
            dict(tp=2, pp=4, dp=2, global_batch=32, schedule="interleaved", virtual_stages=2),
        ),  # fmt: skip
        ("llama2-7b", dict(tp=4, pp=2, dp=4, sp=True, global_batch=64, recompute="selective")),
        ("llama2-7b", dict(tp=1, pp=1, dp=8, global_batch=32, zero=1)),
        ("mixtral-8x7b", dict(tp=2, pp=4, dp=8, ep=4, global_batch=128)),
    ],
)
def test_the_timeline_agrees_with_the_estimate_within_2_percent(model, kw):
    cfg, st = get_model(model), Strategy(**kw)
    tl = simulate_step(cfg, st, cluster=H100, seq=SEQ)
    est = estimate_training(cfg, st, cluster=H100, seq=SEQ)
    assert tl.step_time_s == pytest.approx(est.step_time_s, rel=0.02)


def test_the_breakdown_items_sum_to_the_step_time(llama7b):
    tl = simulate_step(llama7b, Strategy(tp=2, pp=4, dp=2, global_batch=32), cluster=H100, seq=SEQ)
    bd = tl.breakdown()
    assert bd.total_s == pytest.approx(tl.step_time_s, rel=1e-9)
    cats = set(bd.by("category")["category"])
    assert {"gemm", "attention", "bubble", "communication"} <= cats


@pytest.mark.parametrize("slowdown", [0.05, 0.2])
def test_a_straggler_gpu_slows_the_step(llama7b, slowdown):
    st = Strategy(tp=2, pp=4, dp=4, global_batch=64)
    base = simulate_step(llama7b, st, cluster=H100, seq=SEQ).step_time_s
    slow = simulate_step(llama7b, st, cluster=H100, seq=SEQ,
                         stragglers=(Straggler(rank=30, slowdown=slowdown),))  # fmt: skip
    slower = simulate_step(llama7b, st, cluster=H100, seq=SEQ,
                           stragglers=(Straggler(rank=30, slowdown=2 * slowdown),))  # fmt: skip
    assert base < slow.step_time_s < slower.step_time_s
    # the straggler's stage sets the pace: at most its own slowdown on the whole step
    assert slow.step_time_s <= base * (1 + slowdown) * 1.001
    assert slow.gpus[0].dp == 3  # the replica with the straggler is the one simulated


@pytest.mark.parametrize("all_ranks", [False, True])
@pytest.mark.parametrize("rank", [0, 6])  # the first stage and the last
def test_a_straggler_never_lowers_the_pipeline_bubble(llama7b, rank, all_ranks):
    st = Strategy(tp=2, pp=4, dp=2, global_batch=32)
    bubbles = [
        simulate_step(llama7b, st, cluster=H100, seq=SEQ, all_ranks=all_ranks,
                      stragglers=(Straggler(rank=rank, slowdown=x),) if x else ()).bubble_fraction()
        for x in (0.0, 0.02, 0.1, 0.3)
    ]  # fmt: skip
    assert bubbles == sorted(bubbles) and bubbles[-1] > bubbles[0]


def test_same_seed_same_timeline_and_another_seed_another(llama7b):
    st = Strategy(tp=2, pp=2, dp=2, global_batch=8)
    runs = [simulate_step(llama7b, st, cluster=H100, seq=2048, jitter=0.05, seed=s)
            for s in (7, 7, 8)]  # fmt: skip
    assert runs[0].frame().equals(runs[1].frame())
    assert runs[0].step_time_s != runs[2].step_time_s


def test_every_replica_simulated_gives_the_symmetric_answer_without_jitter(llama7b):
    st = Strategy(tp=2, pp=2, dp=2, global_batch=8)
    one = simulate_step(llama7b, st, cluster=H100, seq=2048)
    every = simulate_step(llama7b, st, cluster=H100, seq=2048, all_ranks=True)
    assert len(every.gpus) == 2 * len(one.gpus)
    assert every.step_time_s == pytest.approx(one.step_time_s, rel=1e-9)


def test_transfers_that_meet_on_a_link_share_it():
    import simpy

    env = simpy.Environment()
    link = Link(env, "nic")
    done = {}

    def send(name, at, work):
        yield env.timeout(at)
        yield link.transfer(work)
        done[name] = env.now

    env.process(send("a", 0.0, 1.0))
    env.process(send("b", 0.5, 1.0))
    env.run()
    # a alone for 0.5 s, then both at half speed: a finishes at 1.5, b at 2.0
    assert done["a"] == pytest.approx(1.5) and done["b"] == pytest.approx(2.0)
    assert link.shared_s == pytest.approx(1.0) and link.busy_s == pytest.approx(2.0)


def test_link_contention_never_speeds_a_step_and_slows_fsdp_with_pipeline_sends():
    cl = with_placement(H100, "tp,cp,dp,pp")
    cfg = get_model("llama2-13b")
    st = Strategy(tp=4, pp=4, dp=8, global_batch=32, overlap_pp=True, zero=3)
    shared = simulate_step(cfg, st, cluster=cl, seq=SEQ)
    private = simulate_step(cfg, st, cluster=cl, seq=SEQ, contention=False)
    assert shared.step_time_s > private.step_time_s
    assert sum(v["shared_s"] for v in shared.links.values()) > 0


def test_the_lm_head_stage_computes_more_than_a_middle_stage():
    cfg = get_model("llama3-8b")  # 128k vocabulary: a heavy LM head on the last stage
    tl = simulate_step(cfg, Strategy(tp=1, pp=4, dp=1, global_batch=8), cluster=H100, seq=SEQ)
    compute = tl.summary().set_index("stage")["compute_s"]
    assert compute[3] > 1.05 * compute[1]


def test_bad_perturbations_are_clear_errors(llama7b):
    st = Strategy(tp=2, pp=2, dp=2, global_batch=8)
    with pytest.raises(GpuplanError, match="straggler rank=8 is invalid: choose 0 .. 7"):
        simulate_step(
            llama7b, st, cluster=H100, seq=2048, stragglers=(Straggler(rank=8, slowdown=0.1),)
        )
    with pytest.raises(GpuplanError, match="slowdown=-0.5"):
        simulate_step(
            llama7b, st, cluster=H100, seq=2048, stragglers=(Straggler(rank=1, slowdown=-0.5),)
        )
    with pytest.raises(GpuplanError, match="jitter=-1"):
        simulate_step(llama7b, st, cluster=H100, seq=2048, jitter=-1)
