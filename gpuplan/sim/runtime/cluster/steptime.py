"""A job's step time on the GPUs it was given: the training estimate on the placed topology.

The placement's ``PlacementShape`` becomes a ``Cluster`` as the job sees it: its scale-up domain
shrinks to the GPUs every node of the allocation holds together (a TP group split over two nodes
talks over the NIC), and its leaf group to the nodes per leaf group the job spans (groups larger
than that cross the spine at ``oversubscription``). ``estimate_training`` on that cluster gives
the step time, so a bad placement costs what the collective model says it costs. Estimates are
cached by (model, strategy, seq, domain, leaf size); kernels are priced once per model.

A job given as ``step_time_s`` (no model) scales the part of its step that is communication
(``comm_fraction``) by the bandwidth it loses: the spine's oversubscription when it spans leaf
groups, the scale-up over the scale-out bandwidth when its TP groups straddle nodes.
"""

from __future__ import annotations

from dataclasses import replace

from gpuplan.hwmodels.efficiency import efficiency_for
from gpuplan.sim.parallel.compute import CostCache
from gpuplan.sim.parallel.estimate import estimate_training
from gpuplan.sim.parallel.topology import Cluster
from gpuplan.sim.runtime.cluster.jobs import JobSpec
from gpuplan.sim.runtime.cluster.placement import PlacementShape
from gpuplan.workloads.presets import get_model


class StepTimes:
    """Step times of jobs on placements of ``cluster``, memoized."""

    def __init__(self, cluster: Cluster, fit=None) -> None:
        self.cluster = cluster
        self.eff = fit or efficiency_for(cluster.gpu)  # ``fit``: a fit of one's own records
        self._costs: dict[str, CostCache] = {}
        self._memo: dict[tuple, float] = {}
        self.estimates = 0

    def ideal(self, job: JobSpec) -> float:
        """The step time on the best placement: every group where the topology wants it."""
        ideal = PlacementShape(gpus=job.gpus, nodes=0, aligned=self.cluster.scaleup_size,
                               leaf_groups=1, nodes_per_leaf=self.cluster.nodes_per_leaf)  # fmt: skip
        return self.placed(job, ideal)

    def placed(self, job: JobSpec, shape: PlacementShape) -> float:
        """The step time of ``job`` on an allocation of that shape."""
        domain = min(self.cluster.scaleup_size, shape.aligned)
        leaf = shape.nodes_per_leaf if shape.leaf_groups > 1 else self.cluster.nodes_per_leaf
        if job.step_time_s is not None:
            return job.step_time_s * self._comm_factor(job, domain, shape.leaf_groups)
        key = (job.model, job.strategy, job.seq, domain, leaf)
        if key not in self._memo:
            self._memo[key] = self._estimate(job, domain, leaf)
        return self._memo[key]

    def _estimate(self, job: JobSpec, domain: int, leaf: int) -> float:
        cfg = get_model(job.model)
        placed = replace(self.cluster, scaleup_size=domain, nodes_per_leaf=leaf)
        if job.model not in self._costs:
            self._costs[job.model] = CostCache(cfg, self.cluster.accelerator, self.eff)
        seq = job.seq or min(cfg.max_seq_len, 8192)
        self.estimates += 1
        est = estimate_training(cfg, job.strategy, cluster=placed, seq=seq, eff=self.eff,
                                costs=self._costs[job.model])  # fmt: skip
        return est.step_time_s

    def _comm_factor(self, job: JobSpec, domain: int, leaf_groups: int) -> float:
        c = self.cluster
        slow = c.oversubscription if leaf_groups > 1 else 1.0
        if domain < min(job.gpus, c.scaleup_size):
            slow *= c.scaleup_bytes_per_s / (c.scaleout_bytes_per_s * c.scaleout_efficiency)
        return 1.0 + job.comm_fraction * (slow - 1.0)
