"""Layer 3, runtime orchestration: a cluster over weeks — jobs queue, land on a topology, train,
checkpoint, fail, restart and finish — on simpy.

``simulate_cluster(config, jobs, seed=)`` -> ``ClusterResult`` (per-job and per-event DataFrames,
GPU samples for the timeline plot, the summary, the conservation checks); ``run_scenario(path)``
runs a YAML scenario (``scenarios/``), variants included.

- ``config``: ``ClusterConfig`` (machine, policies, failures, checkpoints, recovery);
- ``jobs``: traces from CSV/JSON Lines or generated from ``data/job_mix.yaml``;
- ``placement``: topology-aware, first-fit, random, GPU-granular first-fit;
- ``scheduler``: FIFO, EASY backfill, priority with preemption, gang time slicing;
- ``steptime``: a job's step time on its placement, through the training estimate;
- ``failures``: renewal processes from ``data/failure_rates.yaml`` (Llama 3, Table 5);
- ``checkpoint``: checkpoint cost, Young/Daly intervals, progress bookkeeping;
- ``engine``: the simulation; ``metrics``: tables, summary, conservation; ``run``: one run as a
  ``ClusterResult``; ``plot``: the timeline.
"""

from __future__ import annotations

from gpuplan.sim.runtime.cluster.config import ClusterConfig
from gpuplan.sim.runtime.cluster.jobs import JobSpec, generate_trace, load_trace
from gpuplan.sim.runtime.cluster.metrics import ClusterResult
from gpuplan.sim.runtime.cluster.run import simulate_cluster


def run_scenario(path, *, seed: int | None = None, progress: bool = False):
    """Every run of a scenario file (the base and its variants), in order."""
    from gpuplan.sim.runtime.cluster.scenario import run_scenario as run

    return run(path, seed=seed, progress=progress)


__all__ = [
    "ClusterConfig",
    "ClusterResult",
    "JobSpec",
    "generate_trace",
    "load_trace",
    "simulate_cluster",
    "run_scenario",
]
