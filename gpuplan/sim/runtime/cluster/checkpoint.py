"""Checkpoints: what one costs, how often to take them, and how much of a run a failure takes.

- A checkpoint writes the training state (``workloads.memory.training_state_bytes``: weights,
  master weights and optimizer moments) to storage at the smaller of the storage system's
  bandwidth and the job's nodes' (``node_write_bytes_per_s`` each), plus a fixed ``overhead_s``
  (serialization, metadata, barriers). ``blocking``: training stops for the whole write.
  ``async``: training stops only while the state is copied to host memory (over each GPU's PCIe
  link, in parallel), the write runs behind training and the checkpoint counts once it is
  written (as in PyTorch DCP's async_save; Nicolae et al. 2020, "DeepFreeze", IPDPS).
- Loading at a restart reads the state back at the read bandwidth.
- Interval policies (seconds of training between checkpoints): ``fixed``; ``young``, the
  first-order optimum sqrt(2 delta M) for a checkpoint cost delta and a mean time between failures
  M (Young 1974, "A first order approximation to the optimum checkpoint interval", CACM 17(9));
  ``daly``, the higher-order estimate sqrt(2 delta M) [1 + sqrt(delta/(2M))/3 + delta/(18 M)] -
  delta for delta < 2M, else M (Daly 2006, "A higher order estimate of the optimum checkpoint
  interval for restart dumps", FGCS 22(3)); ``none``.
- ``expected_waste``: the share of time lost per unit of time in the first-order model — the
  checkpoint writes delta / (tau + delta), and per failure half a cycle of work plus the restart,
  (tau + delta) / 2 + R, at 1/M failures per second.

``progress_at`` is the exact bookkeeping of a run segment: how much of the elapsed time went to
start-up, training and checkpoint writes, and how much training is safe in a finished checkpoint.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuplan.errors import GpuplanError, check_choice, check_positive

POLICIES = ("none", "fixed", "young", "daly")
MODES = ("blocking", "async")


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointConfig:
    """How checkpoints are taken and priced."""

    policy: str = "young"
    interval_s: float | None = None  # for policy 'fixed'
    mode: str = "blocking"
    write_bytes_per_s: float = 1e12  # storage system, shared
    read_bytes_per_s: float = 1e12
    node_write_bytes_per_s: float = 25e9  # one node's storage path (assumption: 2 x 100 Gb/s)
    overhead_s: float = 10.0  # serialization, metadata, barriers (assumption)

    def __post_init__(self) -> None:
        check_choice("checkpoint policy", self.policy, POLICIES)
        check_choice("checkpoint mode", self.mode, MODES)
        for name in ("write_bytes_per_s", "read_bytes_per_s", "node_write_bytes_per_s"):
            check_positive(name, getattr(self, name))
        if self.overhead_s < 0:
            raise GpuplanError(f"checkpoint overhead_s={self.overhead_s!r} is invalid: use >= 0")
        if self.policy == "fixed":
            if self.interval_s is None:
                raise GpuplanError("checkpoint policy 'fixed' needs interval_s (seconds)")
            check_positive("checkpoint interval_s", self.interval_s)


@dataclass(frozen=True, slots=True)
class CheckpointCost:
    """Seconds a job's checkpoint costs."""

    blocking_s: float  # training stopped
    write_s: float  # from the end of the blocking part until the checkpoint is safe
    load_s: float  # reading it back at a restart


def checkpoint_cost(state_bytes: float, *, nodes: int, gpus: int, host_copy_bytes_per_s: float,
                    cfg: CheckpointConfig) -> CheckpointCost:  # fmt: skip
    """The cost of one checkpoint of ``state_bytes`` written by ``nodes`` nodes."""
    write_bw = min(cfg.write_bytes_per_s, nodes * cfg.node_write_bytes_per_s)
    read_bw = min(cfg.read_bytes_per_s, nodes * cfg.node_write_bytes_per_s)
    write = cfg.overhead_s + state_bytes / write_bw
    load = cfg.overhead_s + state_bytes / read_bw
    if cfg.mode == "blocking":
        return CheckpointCost(write, 0.0, load)
    snapshot = state_bytes / (gpus * host_copy_bytes_per_s)  # every GPU copies its shard
    return CheckpointCost(snapshot, write, load)


def young_interval(delta_s: float, mtbf_s: float) -> float:
    """Young (1974): sqrt(2 delta M)."""
    return math.sqrt(2.0 * delta_s * mtbf_s)


def daly_interval(delta_s: float, mtbf_s: float) -> float:
    """Daly (2006): the higher-order optimum, for delta < 2M (else M)."""
    if delta_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = delta_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * delta_s * mtbf_s) * (1 + math.sqrt(x) / 3 + x / 9) - delta_s


def interval_for(cfg: CheckpointConfig, delta_s: float, mtbf_s: float) -> float:
    """Training seconds between checkpoints under ``cfg``'s policy (inf: never)."""
    if cfg.policy == "none":
        return math.inf
    if cfg.policy == "fixed":
        return float(cfg.interval_s)
    if not math.isfinite(mtbf_s):
        return math.inf
    delta = max(delta_s, 1e-9)
    return young_interval(delta, mtbf_s) if cfg.policy == "young" else daly_interval(delta, mtbf_s)


def expected_waste(
    interval_s: float, delta_s: float, mtbf_s: float, restart_s: float = 0.0
) -> float:
    """First-order share of time lost to checkpoints and failures (see the module notes)."""
    cycle = interval_s + delta_s
    return delta_s / cycle + (cycle / 2.0 + restart_s) / mtbf_s


@dataclass(frozen=True, slots=True)
class Progress:
    """How the elapsed time of a run segment was spent."""

    startup_s: float
    train_s: float  # training done
    durable_s: float  # training safe in a finished checkpoint
    checkpoint_s: float  # training stopped for checkpoints


def progress_at(elapsed_s: float, *, startup_s: float, interval_s: float, blocking_s: float,
                write_s: float = 0.0) -> Progress:  # fmt: skip
    """The bookkeeping of a segment interrupted ``elapsed_s`` after it began: start-up, then
    training in chunks of ``interval_s`` each followed by a checkpoint (``blocking_s`` stopped;
    safe ``write_s`` after that)."""
    start = min(elapsed_s, startup_s)
    run = max(elapsed_s - startup_s, 0.0)
    if not math.isfinite(interval_s):
        return Progress(start, run, 0.0, 0.0)
    cycle = interval_s + blocking_s
    full = math.floor(run / cycle)
    rem = run - full * cycle
    train = full * interval_s + min(rem, interval_s)
    ckpt = full * blocking_s + max(rem - interval_s, 0.0)
    safe = full if write_s <= 0 else max(0, min(full, math.floor((run - write_s) / cycle)))
    return Progress(start, train, safe * interval_s, ckpt)


def segment_s(work_s: float, *, startup_s: float, interval_s: float, blocking_s: float) -> float:
    """Wall time of a segment that runs to completion: start-up, ``work_s`` of training and a
    checkpoint after every full interval but the last."""
    if not math.isfinite(interval_s) or work_s <= 0:
        return startup_s + max(work_s, 0.0)
    checkpoints = max(math.ceil(work_s / interval_s) - 1, 0)
    return startup_s + work_s + checkpoints * blocking_s
