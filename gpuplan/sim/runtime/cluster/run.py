"""One cluster run: the simulation of a configuration and its jobs, and what it delivered
(tables, summary, conservation checks) as a ``ClusterResult``."""

from __future__ import annotations

from gpuplan.errors import GpuplanError, check_kind, check_whole
from gpuplan.limits import MAX_SEED
from gpuplan.sim.runtime.cluster.config import ClusterConfig
from gpuplan.sim.runtime.cluster.engine import ClusterSim
from gpuplan.sim.runtime.cluster.jobs import JobSpec
from gpuplan.sim.runtime.cluster.metrics import (
    ClusterResult,
    conservation,
    event_frame,
    job_frame,
    summarize,
)


def simulate_cluster(config: ClusterConfig, jobs: list[JobSpec], *, seed: int = 0,
                     progress: bool = False, name: str = "cluster", fit=None) -> ClusterResult:  # fmt: skip
    """Run ``jobs`` on the cluster of ``config``; the same seed gives the same result. ``fit``:
    the GPU's efficiency fit (default its built-in one); the summary names it."""
    import pandas as pd

    check_kind("config", config, ClusterConfig)
    check_kind("jobs", jobs, (list, tuple))
    if not jobs:
        raise GpuplanError("jobs is empty: give at least one JobSpec")
    for job in jobs:
        check_kind("jobs[...]", job, JobSpec)
    check_whole("seed", seed, low=0, high=MAX_SEED)
    check_kind("name", name, str)
    check_kind("fit", fit, ("Efficiency", None))
    sim = ClusterSim(config, jobs, seed=seed, progress=progress, fit=fit)
    wall_s = sim.run()
    jf, ev = job_frame(sim), event_frame(sim)
    checks = conservation(sim, jf)
    samples = pd.DataFrame([(0.0, 0, config.capacity_gpus, 0), *sim.samples],
                           columns=["time_s", "allocated", "idle", "down"])  # fmt: skip
    return ClusterResult(name=name, jobs=jf, events=ev, samples=samples,
                         summary=summarize(sim, jf, ev, wall_s)
                         | {"efficiency_source": sim.steps.eff.source},
                         conservation=checks)  # fmt: skip
