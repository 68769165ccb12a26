"""The cluster simulator: exact answers for tiny clusters, conservation, determinism, policies,
failures, spares, placement's effect on step time, and clear errors."""

import math
from dataclasses import replace

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.sim.parallel import get_cluster
from gpuplan.sim.runtime.cluster import ClusterConfig, JobSpec, generate_trace, simulate_cluster
from gpuplan.sim.runtime.cluster.checkpoint import CheckpointConfig
from gpuplan.sim.runtime.cluster.failures import Cause, load_causes

H100 = get_cluster("dgx-h100")
NO_CKPT = CheckpointConfig(policy="none")


def cfg(**kw):
    base = dict(cluster=H100, nodes=4, checkpoint=NO_CKPT, restart_s=0.0)
    return ClusterConfig(**(base | kw))


def job(i, gpus=8, arrival=0.0, steps=100, step=1.0, **kw):
    return JobSpec(id=f"j{i}", arrival_s=arrival, gpus=gpus, step_time_s=step, steps=steps, **kw)


def node_failure(rate):
    return Cause(name="gpu", category="gpu", unit="gpu", scope="node", rate_per_hour=rate,
                 detection_s=60.0, repair_s=3600.0)  # fmt: skip


def test_a_lone_job_waits_for_nothing_and_takes_its_work_plus_its_launch():
    r = simulate_cluster(cfg(restart_s=30.0), [job(0, steps=1000, arrival=5.0)])
    row = r.jobs.iloc[0]
    assert row.queue_s == 0.0 and row.first_start_s == 5.0
    assert row.jct_s == pytest.approx(30.0 + 1000.0)
    assert r.summary["goodput"] == pytest.approx(1000 / 1030)


def test_fifo_blocks_behind_the_head_and_backfill_does_not():
    jobs = [job(0, gpus=24, steps=1000), job(1, gpus=32, arrival=1, steps=100),
            job(2, gpus=8, arrival=2, steps=500)]  # fmt: skip
    fifo = simulate_cluster(cfg(policy="fifo"), jobs).jobs.set_index("id")
    easy = simulate_cluster(cfg(policy="backfill"), jobs).jobs.set_index("id")
    assert fifo.loc["j2", "first_start_s"] >= fifo.loc["j1", "end_s"]  # behind the 32-GPU head
    assert easy.loc["j2", "first_start_s"] == pytest.approx(2.0)  # ends before the head's turn
    assert easy.loc["j1", "first_start_s"] == fifo.loc["j1", "first_start_s"]  # not delayed


def test_a_high_priority_job_preempts_a_lower_one_which_then_resumes():
    jobs = [job(0, gpus=32, steps=10_000), job(1, gpus=16, arrival=100, steps=50, priority=1)]
    r = simulate_cluster(cfg(policy="priority"), jobs)
    j = r.jobs.set_index("id")
    assert j.loc["j0", "preemptions"] == 1 and j.loc["j0", "status"] == "done"
    # it starts once the preempted job has saved its checkpoint (the fixed 10 s overhead)
    assert 100.0 <= j.loc["j1", "first_start_s"] <= 110.0 + 1e-9
    assert j.loc["j0", "steps_done"] == pytest.approx(10_000)


def test_gang_time_slicing_lets_a_waiting_job_run_before_a_long_one_ends():
    jobs = [job(0, gpus=32, steps=20_000), job(1, gpus=32, arrival=10, steps=100)]
    fifo = simulate_cluster(cfg(policy="fifo"), jobs).jobs.set_index("id")
    gang = simulate_cluster(cfg(policy="gang", quantum_s=1000.0), jobs).jobs.set_index("id")
    assert gang.loc["j1", "end_s"] < fifo.loc["j1", "end_s"]
    assert gang.loc["j0", "preemptions"] >= 1


def many_jobs(seed=1):
    return generate_trace(jobs=300, capacity_gpus=256, load=1.1, seed=seed)


def test_every_run_conserves_jobs_and_gpu_time():
    causes, _ = load_causes(scale=200.0)  # many failures, to exercise every path
    c = ClusterConfig(cluster=H100, nodes=32, spare_nodes=2, policy="backfill", causes=causes,
                      horizon_s=10 * 86400.0)  # fmt: skip
    r = simulate_cluster(c, many_jobs())
    s, checks = r.summary, r.conservation
    assert checks["ok"] and abs(checks["gpu_time_residual"]) < 1e-9
    assert s["finished"] + s["running"] + s["queued"] + s["not_arrived"] + s["rejected"] == 300
    hours = s["allocated_gpu_hours"] + s["idle_gpu_hours"] + s["down_gpu_hours"]
    assert hours == pytest.approx(c.capacity_gpus * 10 * 24)
    assert s["interruptions"] > 10 and s["lost_gpu_hours"] > 0


def test_same_seed_same_result_and_another_seed_another():
    causes, _ = load_causes(scale=100.0)
    c = ClusterConfig(cluster=H100, nodes=32, policy="backfill", placement="random",
                      causes=causes, horizon_s=5 * 86400.0)  # fmt: skip
    a, b, d = (simulate_cluster(c, many_jobs(), seed=s) for s in (4, 4, 5))
    assert a.jobs.equals(b.jobs) and a.events.equals(b.events)
    assert not a.events.equals(d.events)


def test_failures_cost_goodput_and_spares_shorten_the_recovery():
    long = [job(0, gpus=32, steps=3e5, state_bytes=0.0)]
    clean = simulate_cluster(cfg(), long).summary
    failing = cfg(causes=(node_failure(1 / 500),), horizon_s=3e5 * 3,
                  checkpoint=CheckpointConfig(policy="young"))  # fmt: skip
    without = simulate_cluster(failing, long, seed=1)
    spared = simulate_cluster(replace(failing, spare_nodes=2), long, seed=1)
    assert without.summary["goodput"] < clean["goodput"]
    assert without.summary["interruptions"] > 0
    assert spared.jobs.iloc[0].end_s < without.jobs.iloc[0].end_s  # no wait for repairs


def test_a_scattered_placement_slows_steps_through_the_collective_model():
    from gpuplan.sim.runtime.cluster.jobs import make_strategy

    jobs = [job(0, gpus=4, steps=10_000),
            JobSpec(id="tp8", arrival_s=1, gpus=16, duration_s=3600.0, model="llama2-13b",
                    strategy=make_strategy(16, {"tp": 8}), seq=4096)]  # fmt: skip
    split = simulate_cluster(cfg(placement="gpu-first-fit"), jobs).jobs.set_index("id")
    packed = simulate_cluster(cfg(placement="topology"), jobs).jobs.set_index("id")
    assert split.loc["tp8", "slowdown"] > 1.1  # its TP groups straddle nodes: NIC, not NVLink
    assert packed.loc["tp8", "slowdown"] == pytest.approx(1.0)
    assert split.loc["tp8", "end_s"] > packed.loc["tp8", "end_s"]


def test_a_job_larger_than_the_cluster_is_a_clear_error_or_a_rejection():
    with pytest.raises(GpuplanError, match="asks for 64 GPUs but the cluster schedules 32"):
        simulate_cluster(cfg(), [job(0, gpus=64)])
    r = simulate_cluster(cfg(on_oversize="reject"), [job(0, gpus=64), job(1)])
    assert r.summary["rejected"] == 1 and r.summary["finished"] == 1


def test_bad_rates_and_policies_are_clear_errors():
    with pytest.raises(GpuplanError, match="rate_per_hour=-1"):
        Cause(name="x", category="gpu", unit="gpu", scope="node", rate_per_hour=-1,
              detection_s=0, repair_s=0)  # fmt: skip
    with pytest.raises(GpuplanError, match="scheduler policy='sjf'"):
        cfg(policy="sjf")
    with pytest.raises(GpuplanError, match="give exactly one of steps, tokens, duration_s"):
        JobSpec(id="x", arrival_s=0, gpus=8, step_time_s=1.0)
    with pytest.raises(GpuplanError, match="unknown failure cause"):
        load_causes(overrides={"meteor": {"rate_per_hour": 1.0}})


def test_weibull_failures_have_the_mean_rate_of_the_exponential_ones():
    import numpy as np

    from gpuplan.sim.runtime.cluster.failures import failure_events

    causes, shape = load_causes()
    units = {"gpu": 16384, "job_gpu": 16384, "node": 2048, "leaf": 64}
    horizon = 365 * 86400.0
    exp = len(failure_events(causes, units=units, horizon_s=horizon, rng=np.random.default_rng(0)))
    wei = len(failure_events(causes, units=units, horizon_s=horizon, rng=np.random.default_rng(0),
                             distribution="weibull", shape=shape))  # fmt: skip
    expected = 466 * 365 / 54
    assert exp == pytest.approx(expected, rel=0.06) and wei == pytest.approx(expected, rel=0.1)
    assert math.isfinite(wei)


def test_an_nvl72_job_stays_in_one_nvlink_rack_with_topology_aware_placement():
    from gpuplan.sim.runtime.cluster.jobs import make_strategy

    nvl = get_cluster("gb200-nvl72")  # trays of 4 GPUs, 72-GPU NVLink domains
    spec = JobSpec(id="a", arrival_s=0, gpus=64, duration_s=3600.0, model="llama3-70b",
                   strategy=make_strategy(64, {"tp": 8, "pp": 4}), seq=4096)  # fmt: skip
    packed = simulate_cluster(ClusterConfig(cluster=nvl, nodes=72), [spec]).jobs.iloc[0]
    scattered = simulate_cluster(ClusterConfig(cluster=nvl, nodes=72, placement="random"),
                                 [spec]).jobs.iloc[0]  # fmt: skip
    assert packed.slowdown == pytest.approx(1.0) and scattered.slowdown > 1.1
