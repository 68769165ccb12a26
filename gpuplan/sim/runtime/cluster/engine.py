"""The cluster simulation on simpy: jobs arrive, queue, are placed, train, checkpoint, fail,
restart and finish on a cluster whose nodes fail and are repaired.

Processes (plain generators; the modelling lives in the pure modules they call): arrivals, the
failure injector (``failures.failure_events``, drawn up front), one process per running segment
of a job (it waits for the segment's end: training between events is bookkept in closed form by
``checkpoint.progress_at``, so checkpoints cost no events), hold processes (a failed job's
detection, a preempted job's final checkpoint), repairs, gang time slices and the progress bar.
A scheduling pass (``scheduler.run_pass``) runs after every change of the queue or the free GPUs;
this class is the view the policies see. A job's life is in ``job_life``, failures and repairs
in ``outages``, the GPU books in ``gpu_books``.

Nodes are in one of three states — up and schedulable, up and a hot spare, down — and every GPU
is allocated, idle or down; the three GPU-time integrals are kept as the simulation runs and
checked against each other and against the jobs' own accounts at the end (``metrics``).
"""

from __future__ import annotations

import functools
import math
import time

import numpy as np
import simpy

from gpuplan.errors import GpuplanError
from gpuplan.sim.runtime.cluster import scheduler
from gpuplan.sim.runtime.cluster.checkpoint import progress_at
from gpuplan.sim.runtime.cluster.config import ClusterConfig
from gpuplan.sim.runtime.cluster.gpu_books import GpuBooks, spread_spares
from gpuplan.sim.runtime.cluster.job_life import JobLife
from gpuplan.sim.runtime.cluster.jobs import JobSpec
from gpuplan.sim.runtime.cluster.outages import Outages
from gpuplan.sim.runtime.cluster.placement import place
from gpuplan.sim.runtime.cluster.state import JobState
from gpuplan.sim.runtime.cluster.steptime import StepTimes
from gpuplan.workloads.memory import training_state_bytes
from gpuplan.workloads.params import count_params
from gpuplan.workloads.presets import get_model

# A run without a horizon ends when every job has, or at ten years of simulated time: a job of
# 10^15 steps, or one that failures keep from progressing, cannot hold the simulation for ever
UNBOUNDED_LIMIT_S = 3650 * 86400.0


class ClusterSim(GpuBooks, JobLife, Outages):
    """One simulated cluster and its jobs (a ``scheduler`` view): its GPU books, a job's life,
    failures and repairs are the mixed-in ``GpuBooks``, ``JobLife`` and ``Outages``."""

    def __init__(self, cfg: ClusterConfig, jobs: list[JobSpec], *, seed: int = 0,
                 progress: bool = False, fit=None) -> None:  # fmt: skip
        self.cfg, self.env = cfg, simpy.Environment()  # the engine's one environment
        self.gpn = cfg.gpus_per_node
        # nodes per scale-up domain (1 for DGX; 18 trays of 4 GPUs in a GB200 NVL72 rack) and
        # per leaf group (the cluster counts leaf groups in domains)
        self.npd = max(1, cfg.cluster.scaleup_size // self.gpn)
        self.npl = cfg.cluster.nodes_per_leaf * self.npd
        n = cfg.total_nodes
        self.node_alloc = np.zeros(n, int)
        self.down = np.zeros(n, bool)
        self.spare = np.zeros(n, bool)
        self.spare[spread_spares(cfg.spare_nodes, n, self.npl)] = True
        self.node_jobs: list[dict[str, int]] = [{} for _ in range(n)]
        seeds = np.random.SeedSequence(seed).spawn(2)
        self.fail_rng, self.place_rng = (np.random.default_rng(s) for s in seeds)
        self.steps = StepTimes(cfg.cluster, fit)  # ``fit``: default the GPU's built-in one
        self.acc = cfg.cluster.accelerator
        self.jobs: dict[str, JobState] = {}
        self.queue: list[JobState] = []
        self.running_ids: dict[str, JobState] = {}
        self.making: set[str] = set()
        self.log: list[tuple] = []  # (time_s, kind, job, node, cause, detail)
        self.samples: list[tuple] = []  # (time_s, allocated, idle, down) after each change
        self.alloc_gpus, self.down_gpus = 0, 0
        self.idle_gpus = cfg.capacity_gpus
        self.free_usable = cfg.schedulable_gpus
        self.gpu_s = {"allocated": 0.0, "idle": 0.0, "down": 0.0}
        self._last = 0.0
        self.done = 0
        self.all_done = self.env.event()
        self.events = 0
        self._seq = 0
        self._bar = None
        self._add_jobs(jobs)
        self.progress = progress

    # -- set-up --------------------------------------------------------------------------------
    def _add_jobs(self, specs: list[JobSpec]) -> None:
        for k, spec in enumerate(sorted(specs, key=lambda j: (j.arrival_s, j.id))):
            if spec.id in self.jobs:
                raise GpuplanError(f"job id {spec.id!r} appears twice in the trace")
            state = JobState(spec, ideal_step_s=0.0, steps_total=0.0, state_bytes=0.0,
                             order=(-spec.priority, spec.arrival_s, k))  # fmt: skip
            self.jobs[spec.id] = state
            if spec.gpus > self.cfg.schedulable_gpus:
                if self.cfg.on_oversize == "error":
                    raise GpuplanError(
                        f"job {spec.id!r} asks for {spec.gpus} GPUs but the cluster schedules "
                        f"{self.cfg.schedulable_gpus} ({self.cfg.nodes} nodes of {self.gpn}); "
                        "shrink the job or grow the cluster (or on_oversize: reject)"
                    )
                state.status, state.reason = "rejected", "larger than the cluster"
                continue
            state.ideal_step_s = state.step_s = self.steps.ideal(spec)
            state.steps_total = _steps(spec, state.ideal_step_s)
            state.state_bytes = _state_bytes(spec)

    def note(self, kind: str, job: str = "", node: int = -1, cause: str = "", detail="") -> None:
        self.log.append((self.env.now, kind, job, node, cause, detail))

    # -- the scheduler's view ------------------------------------------------------------------
    @property
    def now(self) -> float:
        return self.env.now

    @property
    def free_gpus(self) -> int:
        return self.free_usable

    def start(self, job: JobState) -> bool:
        usable = ~self.down & ~self.spare
        free = self.gpn - self.node_alloc
        alloc = place(self.cfg.placement, job.gpus, free, usable, gpus_per_node=self.gpn,
                      nodes_per_leaf=self.npl, rng=self.place_rng,
                      nodes_per_domain=self.npd)  # fmt: skip
        if alloc is None:
            return False
        self._tick()
        for node, count in zip(alloc.nodes, alloc.counts, strict=True):
            self._alloc(node, count)
            self.node_jobs[node][job.id] = count
        self._sample()
        self.queue.remove(job)
        job.alloc, job.alloc_at = alloc, self.now
        job.queue_s += self.now - job.queued_at
        first = math.isnan(job.first_start_s)
        if first:
            job.first_start_s = self.now
        else:
            job.restarts += 1
        self.note("start" if first else "restart", job.id, detail=f"{len(alloc.nodes)} nodes")
        self._begin(job, self.cfg.restart_s + self._load_s(job))
        return True

    def releases(self):
        ends = sorted((j.segment.end_s, j.gpus) for j in self.running_ids.values() if j.segment)
        return ends

    def runtime(self, job: JobState) -> float:
        return self.cfg.restart_s + job.remaining_s()

    def running(self) -> list[JobState]:
        return [j for j in self.running_ids.values() if j.segment is not None]

    def making_room(self) -> bool:
        return bool(self.making)

    def preempt(self, job: JobState, *, for_job: JobState) -> None:
        self.making.add(job.id)
        job.preemptions += 1
        self.note("preemption", job.id, detail=f"for {for_job.id}")
        self._settle(job, graceful=True)
        self._hold(job, self._cost(job).blocking_s, "save", "requeue")

    # -- processes ---------------------------------------------------------------------------------
    def _arrivals(self):
        for job in sorted(self.jobs.values(), key=lambda j: j.order[1:]):
            if job.status == "rejected":
                self.note("reject", job.id, detail=job.reason)
                continue
            yield self.env.timeout(max(job.spec.arrival_s - self.now, 0.0))
            self.note("arrival", job.id)
            job.queued_at = self.now
            self._enqueue(job)
            self._kick()

    def _slices(self):
        while True:
            yield self.env.timeout(self.cfg.quantum_s)
            scheduler.time_slice(self.queue, self, self.cfg.quantum_s)
            self._kick()

    def _ticker(self, every_s: float):
        while True:
            yield self.env.timeout(every_s)
            self._bar.update(every_s / 86400.0)

    # -- run -------------------------------------------------------------------------------------
    def run(self) -> float:
        """Simulate to the horizon (or until every job is done); returns the wall seconds."""
        started = time.perf_counter()
        env = self.env
        self._runnable = sum(j.status != "rejected" for j in self.jobs.values())
        env.process(self._arrivals())
        if self.cfg.causes:
            env.process(self._failures())
        if self.cfg.policy == "gang":
            env.process(self._slices())
        self._open_bar()
        stop = self.cfg.horizon_s if self.cfg.horizon_s is not None else self.all_done
        if self._runnable == 0:
            self.all_done.succeed()
        try:
            self._loop(stop)
        finally:
            if self._bar is not None:
                self._bar.close()
        self._close()
        return time.perf_counter() - started

    def _loop(self, stop) -> None:
        env, n = self.env, 0
        until = stop if isinstance(stop, simpy.Event) else None
        while True:
            if until is not None and until.triggered:
                break
            if until is None and env.peek() >= stop:
                break
            if env.peek() == math.inf:
                break
            if until is not None and env.peek() > UNBOUNDED_LIMIT_S:
                env.run(until=UNBOUNDED_LIMIT_S)  # stop the clock at the limit
                break
            env.step()
            n += 1
        if until is None:
            env.run(until=stop)  # advance the clock to the horizon
        self.events = n

    def _open_bar(self) -> None:
        if not self.progress:
            return
        from tqdm import tqdm

        if self.cfg.horizon_s is not None:
            days = self.cfg.horizon_s / 86400.0
            self._bar = tqdm(total=round(days, 3), unit="day", desc="simulating", leave=False,
                             bar_format="{l_bar}{bar}| {n:.1f}/{total:.1f} days [{elapsed}]")  # fmt: skip
            self.env.process(self._ticker(self.cfg.horizon_s / 200))
        else:
            self._bar = tqdm(total=self._runnable, unit="job", desc="simulating", leave=False)

    def _close(self) -> None:
        """Book the time of jobs still running or holding at the end."""
        self._tick()
        for job in self.jobs.values():
            if job.status == "running" and job.segment is not None:
                seg = job.segment
                p = progress_at(self.now - seg.start_s, startup_s=seg.startup_s,
                                interval_s=seg.interval_s, blocking_s=seg.blocking_s)  # fmt: skip
                job.time["startup"] += p.startup_s
                job.book_train(p.train_s)  # in progress: it counts if the job goes on
                job.time["checkpoint"] += p.checkpoint_s
                job.steps_done = min(job.steps_total, job.steps_done + p.train_s / job.step_s)
            elif job.status == "holding":
                job.time[job.hold_phase] += self.now - job.hold_start
            if job.alloc is not None:
                job.alloc_s += self.now - job.alloc_at
            if job.status in ("queued",):
                job.queue_s += self.now - job.queued_at


def _steps(spec: JobSpec, ideal_step_s: float) -> float:
    if spec.steps is not None:
        return float(spec.steps)
    if spec.tokens is not None:
        return spec.tokens / spec.tokens_per_step
    return spec.duration_s / ideal_step_s


def _state_bytes(spec: JobSpec) -> float:
    """A checkpoint: weights and optimizer state (gradients are not saved)."""
    if spec.state_bytes is not None:
        return spec.state_bytes
    if spec.model is None:
        return 0.0
    precision = spec.strategy.state_precision if spec.strategy else "bf16-mixed-megatron"
    return _model_state_bytes(spec.model, precision)


@functools.cache
def _model_state_bytes(model: str, precision: str) -> float:
    state = training_state_bytes(count_params(get_model(model)).total, precision)
    return state.weights_bytes + state.optimizer_bytes
