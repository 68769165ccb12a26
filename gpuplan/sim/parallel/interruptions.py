"""The expected cost of interruptions over a training run: failures, checkpoints and restarts.

A first-order model of a job on ``gpus`` GPUs, every figure from the cluster model
(``sim.runtime.cluster``), none restated here:

- interruptions at the default rates per GPU, per node and per running GPU
  (``cluster/data/failure_rates.yaml``: Llama 3 405B's 54 days, Dubey et al. 2024, Table 5) give
  the job's mean time between interruptions M (``failures.mtbf_s``);
- one checkpoint of the weights and optimizer state costs delta (``checkpoint.checkpoint_cost``
  with the default ``CheckpointConfig``: blocking writes at the storage or node bandwidth);
  checkpoints come every Young (1974) interval (``checkpoint.interval_for``, the default policy);
- a restart costs R: the mean detection time of the causes (rate-weighted), rescheduling and
  restart (``ClusterConfig``'s defaults) and reading the checkpoint back;
- the share of wall time lost is ``checkpoint.expected_waste`` (writes, half a cycle of lost work
  and R per interruption), so the run takes time_to_train / (1 - waste).

It ignores queueing for spare nodes and repairs (the cluster simulation, ``gpuplan cluster``,
plays those out): it is the overhead of a job that always finds spare nodes.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from gpuplan.sim.parallel.cost import run_budget
from gpuplan.workloads.memory import training_state_bytes
from gpuplan.workloads.params import count_params

HOST_COPY_BYTES_PER_S = 25e9  # the cluster engine's fallback when a datasheet has no PCIe rate


@dataclass(frozen=True, slots=True, kw_only=True)
class Interruptions:
    """Expected interruptions of a run and the time they add."""

    mtbf_s: float  # mean time between interruptions of the job
    checkpoint_s: float  # one blocking checkpoint
    checkpoint_interval_s: float  # training between checkpoints (Young)
    restart_s: float  # detection + rescheduling + restart + checkpoint read
    waste: float  # share of wall time lost (checkpoints, lost work, restarts)
    source: str

    def with_failures_s(self, time_to_train_s):
        """Wall time of ``time_to_train_s`` of training once interruptions are paid for."""
        return time_to_train_s / (1.0 - self.waste) if self.waste < 1.0 else math.inf

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def training_budget(cfg, est, cluster, *, tokens: float,
                    usd_per_gpu_hour: float | None = None) -> dict[str, Any]:  # fmt: skip
    """The budget of training on ``tokens`` at the estimate ``est``'s rate on ``cluster``
    (``cost.run_budget``), with the run's expected interruptions (``with_interruptions``)."""
    budget = run_budget(
        tokens=tokens, tokens_per_s=est.tokens_per_s, gpus=est.gpus, acc=cluster.accelerator,
        usd_per_gpu_hour=usd_per_gpu_hour,
    )  # fmt: skip
    return budget.to_dict() | with_interruptions(cfg, est, cluster, budget.time_to_train_s)


def _default(field: str) -> float:
    from gpuplan.sim.runtime.cluster.config import ClusterConfig

    return ClusterConfig.__dataclass_fields__[field].default


def expected_interruptions(cfg, *, gpus: int, gpus_per_node: int, acc,
                           state_precision: str = "bf16-mixed-megatron") -> Interruptions:  # fmt: skip
    """Interruptions of a job training ``cfg`` on ``gpus`` GPUs of ``acc``, default rates."""
    # the cluster package imports this one's cost model: imported here, not at the top
    from gpuplan.sim.runtime.cluster.checkpoint import (
        CheckpointConfig,
        checkpoint_cost,
        expected_waste,
        interval_for,
    )
    from gpuplan.sim.runtime.cluster.failures import load_causes, mtbf_s

    causes, _shape = load_causes()
    nodes = math.ceil(gpus / gpus_per_node)
    mtbf = mtbf_s(causes, gpus=gpus, nodes=nodes)
    state = training_state_bytes(count_params(cfg).total, state_precision)
    ckpt = CheckpointConfig()
    cost = checkpoint_cost(
        state.weights_bytes + state.optimizer_bytes, nodes=nodes, gpus=gpus,
        host_copy_bytes_per_s=acc.pcie_bytes_per_s or HOST_COPY_BYTES_PER_S, cfg=ckpt,
    )  # fmt: skip
    interval = interval_for(ckpt, cost.blocking_s, mtbf)
    units = {"gpu": gpus, "job_gpu": gpus, "node": nodes, "leaf": 0}
    rates = [c.rate_per_hour * units[c.unit] for c in causes]
    detection = sum(r * c.detection_s for r, c in zip(rates, causes, strict=True)) / sum(rates)
    restart = detection + _default("reschedule_s") + _default("restart_s") + cost.load_s
    return Interruptions(
        mtbf_s=mtbf,
        checkpoint_s=cost.blocking_s,
        checkpoint_interval_s=interval,
        restart_s=restart,
        waste=expected_waste(interval, cost.blocking_s, mtbf, restart),
        source=causes[0].source,
    )


def with_interruptions(cfg, est, cluster, time_to_train_s: float) -> dict:
    """A run budget's keys for the expected interruptions of the run of ``est`` (a
    ``TrainEstimate``) on ``cluster``: the interruptions and the time to train with them."""
    i = expected_interruptions(cfg, gpus=est.gpus, gpus_per_node=cluster.gpus_per_node,
                               acc=cluster.accelerator,
                               state_precision=est.strategy.state_precision)  # fmt: skip
    return {
        "interruptions": i.to_dict(),
        "time_to_train_with_failures_s": i.with_failures_s(time_to_train_s),
    }
