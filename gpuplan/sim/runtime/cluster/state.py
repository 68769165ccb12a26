"""A job as the simulator tracks it: where it is, how far it got, and where its time went.

Time is kept in seconds of the job's wall clock while it holds GPUs, by phase: ``startup``
(launch and checkpoint load), ``train`` (training that counts: it reached a checkpoint or the
job's end), ``lost`` (training a failure threw away), ``checkpoint`` (training stopped to save),
``detect`` (GPUs held by a job that has failed and not yet been told), ``save`` (a graceful stop's
final checkpoint). They add up to the time it held its allocation (``alloc_s``); times ``gpus``
they are GPU-seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuplan.sim.runtime.cluster.jobs import JobSpec
from gpuplan.sim.runtime.cluster.placement import Allocation

PHASES = ("startup", "train", "lost", "checkpoint", "detect", "save")


@dataclass(slots=True)
class Segment:
    """One uninterrupted run: start-up, then training with checkpoints."""

    start_s: float
    startup_s: float
    interval_s: float
    blocking_s: float
    write_s: float
    work_s: float  # training left at the start
    end_s: float


class JobState:
    """Mutable state of one job in the simulation."""

    __slots__ = ("spec", "status", "alloc", "alloc_at", "steps_total", "steps_done",
                 "ideal_step_s", "step_s", "state_bytes", "segment", "proc", "first_start_s",
                 "started_s", "end_s", "queued_at", "queue_s", "restarts", "interruptions",
                 "preemptions", "time", "alloc_s", "hold_until", "hold_start", "hold_phase",
                 "order", "leaf_groups", "reason", "ideal_train_s", "interval_s")  # fmt: skip

    def __init__(self, spec: JobSpec, *, ideal_step_s: float, steps_total: float,
                 state_bytes: float, order: tuple) -> None:  # fmt: skip
        self.spec = spec
        self.status = "pending"  # pending, queued, running, holding, done, rejected
        self.alloc: Allocation | None = None
        self.alloc_at = 0.0
        self.steps_total, self.steps_done = steps_total, 0.0
        self.ideal_step_s, self.step_s = ideal_step_s, ideal_step_s
        self.state_bytes = state_bytes
        self.segment: Segment | None = None
        self.proc = None
        self.first_start_s = math.nan
        self.started_s = math.nan  # start of the current segment
        self.end_s = math.nan
        self.queued_at = spec.arrival_s
        self.queue_s = 0.0
        self.restarts = self.preemptions = 0
        self.interruptions: dict[str, int] = {}
        self.time = dict.fromkeys(PHASES, 0.0)
        self.alloc_s = 0.0
        self.hold_until = math.nan
        self.hold_start, self.hold_phase = math.nan, ""
        self.order = order  # queue key
        self.leaf_groups = 0
        self.reason = ""
        self.ideal_train_s = 0.0  # training time counted, re-timed at the ideal step time
        self.interval_s = math.nan  # checkpoint interval of the latest segment (inf: none)

    def book_train(self, seconds: float) -> None:
        """Training that counts, at the current step time."""
        self.time["train"] += seconds
        self.ideal_train_s += seconds * self.ideal_step_s / self.step_s

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def gpus(self) -> int:
        return self.spec.gpus

    @property
    def priority(self) -> int:
        return self.spec.priority

    def remaining_s(self) -> float:
        """Training left at the current step time."""
        return max(self.steps_total - self.steps_done, 0.0) * self.step_s
