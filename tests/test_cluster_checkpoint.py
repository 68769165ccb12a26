"""Checkpoint intervals (Young 1974; Daly 2006), a segment's bookkeeping, and the Young/Daly
optimum seen in simulation."""

import math

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from gpuplan.errors import GpuplanError
from gpuplan.sim.parallel import get_cluster
from gpuplan.sim.runtime.cluster import ClusterConfig, JobSpec, simulate_cluster
from gpuplan.sim.runtime.cluster.checkpoint import (
    CheckpointConfig,
    checkpoint_cost,
    daly_interval,
    expected_waste,
    progress_at,
    segment_s,
    young_interval,
)
from gpuplan.sim.runtime.cluster.failures import Cause


def test_young_is_where_the_first_order_waste_is_least():
    delta, mtbf = 60.0, 6 * 3600.0
    best = minimize_scalar(lambda t: expected_waste(t, delta, mtbf), bounds=(1, 1e6),
                           method="bounded").x  # fmt: skip
    # the first-order waste's optimum is sqrt(2 delta M) - delta; Young drops the - delta
    assert best == pytest.approx(young_interval(delta, mtbf) - delta, rel=1e-3)
    assert young_interval(delta, mtbf) == pytest.approx(math.sqrt(2 * delta * mtbf))


def test_daly_approaches_young_for_cheap_checkpoints_and_caps_at_the_mtbf():
    mtbf = 10 * 3600.0
    assert daly_interval(1.0, mtbf) == pytest.approx(young_interval(1.0, mtbf), rel=0.01)
    assert daly_interval(3 * mtbf, mtbf) == mtbf
    assert daly_interval(600.0, mtbf) < young_interval(600.0, mtbf) + 600.0


def test_a_segment_books_startup_training_and_checkpoints_exactly():
    p = progress_at(100.0, startup_s=10.0, interval_s=20.0, blocking_s=5.0)
    # 10 start-up, then 90 s: three 25 s cycles (60 train, 15 saving), then 15 s of training
    assert (p.startup_s, p.train_s, p.checkpoint_s, p.durable_s) == (10.0, 75.0, 15.0, 60.0)
    assert p.startup_s + p.train_s + p.checkpoint_s == 100.0
    late = progress_at(100.0, startup_s=10.0, interval_s=20.0, blocking_s=5.0, write_s=30.0)
    assert late.durable_s == 40.0  # the third checkpoint is still being written
    assert segment_s(70.0, startup_s=10.0, interval_s=20.0, blocking_s=5.0) == 10 + 70 + 3 * 5


def test_async_checkpoints_stop_training_only_for_the_copy_to_host():
    cfg = CheckpointConfig(mode="async", write_bytes_per_s=1e11, overhead_s=0.0)
    cost = checkpoint_cost(1e12, nodes=8, gpus=64, host_copy_bytes_per_s=25e9, cfg=cfg)
    blocking = checkpoint_cost(1e12, nodes=8, gpus=64, host_copy_bytes_per_s=25e9,
                               cfg=CheckpointConfig(write_bytes_per_s=1e11, overhead_s=0.0))  # fmt: skip
    assert cost.blocking_s < 1.0 < cost.write_s == pytest.approx(blocking.blocking_s)


def test_a_fixed_policy_without_an_interval_is_a_clear_error():
    with pytest.raises(GpuplanError, match="needs interval_s"):
        CheckpointConfig(policy="fixed")
    with pytest.raises(GpuplanError, match="checkpoint policy='sometimes'"):
        CheckpointConfig(policy="sometimes")


def _lost_share(interval_s: float, seed: int) -> float:
    cause = Cause(name="gpu", category="gpu", unit="gpu", scope="job", rate_per_hour=1 / 2000.0,
                  detection_s=0.0, repair_s=0.0)  # fmt: skip
    ckpt = CheckpointConfig(policy="fixed", interval_s=interval_s, write_bytes_per_s=1e12,
                            overhead_s=120.0)  # fmt: skip
    cfg = ClusterConfig(cluster=get_cluster("dgx-h100"), nodes=8, causes=(cause,), restart_s=0.0,
                        checkpoint=ckpt, horizon_s=120 * 86400.0)  # fmt: skip
    job = JobSpec(id="j", arrival_s=0.0, gpus=64, step_time_s=1.0, steps=1e12, state_bytes=0.0)
    s = simulate_cluster(cfg, [job], seed=seed).summary
    return 1.0 - s["goodput"]


def test_the_young_interval_loses_less_than_much_shorter_or_longer_ones():
    mtbf = 2000 * 3600 / 64  # 64 GPUs at 1/2000 per GPU-hour: 31.25 h
    tau = young_interval(120.0, mtbf)
    waste = {f: np.mean([_lost_share(tau * f, s) for s in range(3)]) for f in (0.2, 1.0, 5.0)}
    assert waste[1.0] < waste[0.2] and waste[1.0] < waste[5.0]
    assert waste[1.0] == pytest.approx(expected_waste(tau, 120.0, mtbf), rel=0.3)
