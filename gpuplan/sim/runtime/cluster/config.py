"""What a cluster simulation needs besides its jobs: the machine, the policies, the failures, the
checkpoints and the recovery times, as one frozen configuration.

Recovery (named assumptions, defaults): after a failure is detected (the cause's
``detection_s``), the job is rescheduled — onto a spare node in ``reschedule_s`` when one is
free, else back through the queue — and restarted in ``restart_s`` (process launch, NCCL
initialization, data loader) plus the time to read its checkpoint. Power (for energy): a GPU
running a job draws ``busy_power_fraction`` of its TDP (``sim.parallel.cost.POWER_FRACTION``),
an idle one ``idle_power_fraction`` (an idle H200 in P0 drew 96-108 W of its 700 W limit in
this repository's own measurement, ``data/h200x2/topology.txt``), one out of service
nothing; the facility multiplies by the PUE (``sim.parallel.cost.PUE``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gpuplan.errors import GpuplanError, check_choice, check_positive
from gpuplan.sim.parallel.cost import POWER_FRACTION, PUE
from gpuplan.sim.parallel.topology import Cluster
from gpuplan.sim.runtime.cluster.checkpoint import CheckpointConfig
from gpuplan.sim.runtime.cluster.failures import DISTRIBUTIONS, Cause
from gpuplan.sim.runtime.cluster.placement import PLACEMENTS
from gpuplan.sim.runtime.cluster.scheduler import POLICIES

IDLE_POWER_FRACTION = 0.15


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterConfig:
    """A simulated cluster and how it is run."""

    cluster: Cluster  # node type, links, leaf-group size, spine oversubscription
    nodes: int  # schedulable nodes
    spare_nodes: int = 0  # hot spares, used only to replace failed nodes of running jobs
    policy: str = "fifo"
    placement: str = "topology"
    backfill_depth: int = 500
    quantum_s: float = 3600.0  # gang time slice
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    causes: tuple[Cause, ...] = ()
    distribution: str = "exponential"
    weibull_shape: float = 0.75
    reschedule_s: float = 60.0
    restart_s: float = 180.0
    horizon_s: float | None = None  # None: until every job is done
    on_oversize: str = "error"  # a job larger than the cluster: "error" or "reject"
    busy_power_fraction: float = POWER_FRACTION
    idle_power_fraction: float = IDLE_POWER_FRACTION
    pue: float = PUE

    def __post_init__(self) -> None:
        check_positive("nodes", self.nodes)
        if self.spare_nodes < 0:
            raise GpuplanError(f"spare_nodes={self.spare_nodes!r} is invalid: use >= 0")
        check_choice("scheduler policy", self.policy, POLICIES)
        check_choice("placement", self.placement, PLACEMENTS)
        check_choice("failure distribution", self.distribution, DISTRIBUTIONS)
        check_choice("on_oversize", self.on_oversize, ("error", "reject"))
        check_positive("quantum_s", self.quantum_s)
        check_positive("weibull_shape", self.weibull_shape)
        for name in ("reschedule_s", "restart_s"):
            if getattr(self, name) < 0:
                raise GpuplanError(f"{name}={getattr(self, name)!r} is invalid: use >= 0")
        if self.horizon_s is not None and not (math.isfinite(self.horizon_s) and self.horizon_s > 0):
            raise GpuplanError(f"horizon_s={self.horizon_s!r} is invalid: a finite number > 0")

    @property
    def gpus_per_node(self) -> int:
        return self.cluster.gpus_per_node

    @property
    def total_nodes(self) -> int:
        return self.nodes + self.spare_nodes

    @property
    def capacity_gpus(self) -> int:
        """Every GPU, spares included."""
        return self.total_nodes * self.gpus_per_node

    @property
    def schedulable_gpus(self) -> int:
        return self.nodes * self.gpus_per_node
