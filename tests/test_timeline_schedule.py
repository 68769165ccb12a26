"""Pipeline schedules: every task once, in a valid order, and the balanced bubble of each
schedule against its closed form (Narayanan et al. 2021, sec. 2.2)."""

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.sim.runtime.timeline.engine import Engine
from gpuplan.sim.runtime.timeline.schedule import bubble_fraction, peak_in_flight, stage_order
from gpuplan.sim.runtime.timeline.work import uniform_plan


def run_uniform(**kw):
    plan = uniform_plan(**kw)
    engine = Engine(plan, replicas=[0], factors={}, jitter=0.0, seed=0)
    engine.run()
    return engine, max(engine.ends.values())


@pytest.mark.parametrize("schedule,v", [("gpipe", 1), ("1f1b", 1), ("interleaved", 2)])
def test_every_stage_runs_each_forward_and_backward_once(schedule, v):
    p, m = 4, 8
    for s in range(p):
        order = stage_order(schedule, p=p, m=m, v=v, stage=s)
        expected = {(k, i, c) for k in "FB" for i in range(m) for c in range(v)}
        assert sorted(order) == sorted(expected)
        for k, i, c in order:  # a backward never comes before its own forward
            if k == "B":
                assert order.index(("F", i, c)) < order.index(("B", i, c))


@pytest.mark.parametrize("p,m", [(4, 8), (8, 64), (2, 2)])
def test_a_balanced_1f1b_pipeline_idles_p_minus_1_over_m_plus_p_minus_1(p, m):
    _engine, step = run_uniform(p=p, m=m, fwd_s=1.0, bwd_s=2.0)
    ideal = m * 3.0
    bubble = (step - ideal) / step
    assert bubble == pytest.approx(bubble_fraction(p=p, m=m), rel=0.02)


def test_interleaving_divides_the_bubble_by_the_virtual_stages():
    p, m, v = 4, 16, 4
    _e, step = run_uniform(p=p, m=m, v=v, schedule="interleaved", fwd_s=1.0, bwd_s=2.0)
    ideal = m * v * 3.0
    assert (step - ideal) / step == pytest.approx(bubble_fraction(p=p, m=m, v=v), rel=0.02)
    _e, plain = run_uniform(p=p, m=m, fwd_s=4.0, bwd_s=8.0)  # same model, one chunk per GPU
    assert step < plain


def test_gpipe_and_1f1b_have_the_same_balanced_bubble_but_1f1b_stashes_fewer_activations():
    p, m = 4, 16
    _e, gpipe = run_uniform(p=p, m=m, schedule="gpipe", fwd_s=1.0, bwd_s=2.0)
    _e, one = run_uniform(p=p, m=m, schedule="1f1b", fwd_s=1.0, bwd_s=2.0)
    assert gpipe == pytest.approx(one)
    assert peak_in_flight(stage_order("gpipe", p=p, m=m, v=1, stage=0)) == m
    assert peak_in_flight(stage_order("1f1b", p=p, m=m, v=1, stage=0)) == p


def test_blocking_sends_lengthen_every_hop_of_the_pipeline():
    _e, free = run_uniform(p=4, m=8, fwd_s=1.0, bwd_s=2.0, send_s=0.1)
    _e, blocking = run_uniform(p=4, m=8, fwd_s=1.0, bwd_s=2.0, send_s=0.1, overlap_pp=False)
    assert blocking > free > 33.0  # 33 s without any send


def test_an_unknown_schedule_and_a_bad_stage_are_clear_errors():
    with pytest.raises(GpuplanError, match="schedule='zigzag'"):
        stage_order("zigzag", p=2, m=2, v=1, stage=0)
    with pytest.raises(GpuplanError, match="stage=5 is invalid"):
        stage_order("1f1b", p=2, m=2, v=1, stage=5)
    with pytest.raises(GpuplanError, match="multiple of p=4"):
        stage_order("interleaved", p=4, m=6, v=2, stage=0)
