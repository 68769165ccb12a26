"""Cluster-simulator speed: one simulated year of a 16,384-GPU cluster with failures and a
10,000-job trace.

2,048 DGX H100 nodes (16,384 GPUs) plus 64 hot spares; EASY backfill with topology-aware
placement; failures at the Llama 3 rates (data/failure_rates.yaml), restarts from Young-interval
checkpoints; 10,000 jobs generated from the default job mix scaled to the cluster (8x the GPUs,
5x the run times: 8-4,096 GPU jobs) at 0.9 of its GPU time, arriving over the year. Target: under
60 s end to end (trace generation, step-time estimates, simulation, tables and checks), with a
progress bar; prints the number of simulated events.

Run: ``python benchmarks/bench_cluster.py``.
"""

from __future__ import annotations

import time

from gpuplan.sim.parallel import get_cluster
from gpuplan.sim.runtime.cluster import ClusterConfig, generate_trace, simulate_cluster
from gpuplan.sim.runtime.cluster.failures import load_causes

TARGET_S = 60.0
YEAR_S = 365 * 86400.0


def main() -> None:
    start = time.perf_counter()
    causes, shape = load_causes()
    cfg = ClusterConfig(cluster=get_cluster("dgx-h100"), nodes=2048, spare_nodes=64,
                        policy="backfill", placement="topology", causes=causes,
                        weibull_shape=shape, horizon_s=YEAR_S)  # fmt: skip
    jobs = generate_trace(jobs=10_000, capacity_gpus=cfg.schedulable_gpus, load=0.9, seed=1,
                          size_scale=8, duration_scale=5.0)  # fmt: skip
    result = simulate_cluster(cfg, jobs, seed=0, progress=True, name="bench-16k-year")
    wall_s = time.perf_counter() - start
    s = result.summary
    print(f"16,384 GPUs (+{cfg.spare_nodes} spare nodes), {len(jobs):,} jobs, "
          f"{s['simulated_s'] / 86400:.0f} simulated days")  # fmt: skip
    print(f"  events simulated         {s['events']:12,}")
    print(f"  events logged            {len(result.events):12,}")
    print(f"  interruptions            {s['interruptions']:12,} ({s['failures']:,} failures)")
    print(f"  jobs finished            {s['finished']:12,} (queued {s['queued']}, running "
          f"{s['running']})")  # fmt: skip
    print(f"  utilization / goodput    {100 * s['utilization']:11.1f}% / "
          f"{100 * s['goodput']:.1f}%")  # fmt: skip
    print(f"  step-time estimates      {s['step_time_estimates']:12,}")
    print(f"  conservation checks      {'ok' if result.conservation['ok'] else 'FAILED':>12}")
    print(f"  simulation               {s['wall_s']:11.2f} s")
    verdict = "met" if wall_s < TARGET_S else "MISSED"
    print(f"  end to end               {wall_s:11.2f} s (target < {TARGET_S:.0f} s: {verdict})")


if __name__ == "__main__":
    main()
