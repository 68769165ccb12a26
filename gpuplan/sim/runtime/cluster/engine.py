"""The cluster simulation on simpy: jobs arrive, queue, are placed, train, checkpoint, fail,
restart and finish on a cluster whose nodes fail and are repaired.

Processes (plain generators; the modelling lives in the pure modules they call): arrivals, the
failure injector (``failures.failure_events``, drawn up front), one process per running segment
of a job (it waits for the segment's end: training between events is bookkept in closed form by
``checkpoint.progress_at``, so checkpoints cost no events), hold processes (a failed job's
detection, a preempted job's final checkpoint), repairs, gang time slices and the progress bar.
A scheduling pass (``scheduler.run_pass``) runs after every change of the queue or the free GPUs;
this class is the view the policies see.

Nodes are in one of three states — up and schedulable, up and a hot spare, down — and every GPU
is allocated, idle or down; the three GPU-time integrals are kept as the simulation runs and
checked against each other and against the jobs' own accounts at the end (``metrics``).
"""

from __future__ import annotations

import bisect
import functools
import math
import time

import numpy as np
import simpy

from gpuplan.errors import GpuplanError
from gpuplan.sim.runtime.cluster import scheduler
from gpuplan.sim.runtime.cluster.checkpoint import (
    checkpoint_cost,
    interval_for,
    progress_at,
    segment_s,
)
from gpuplan.sim.runtime.cluster.config import ClusterConfig
from gpuplan.sim.runtime.cluster.failures import failure_events, mtbf_s
from gpuplan.sim.runtime.cluster.jobs import JobSpec
from gpuplan.sim.runtime.cluster.placement import place
from gpuplan.sim.runtime.cluster.state import JobState, Segment
from gpuplan.sim.runtime.cluster.steptime import StepTimes
from gpuplan.workloads.memory import training_state_bytes
from gpuplan.workloads.params import count_params
from gpuplan.workloads.presets import get_model

CHUNK_S = 30 * 86400.0  # failures drawn a month at a time when the run has no horizon
# A run without a horizon ends when every job has, or at ten years of simulated time: a job of
# 10^15 steps, or one that failures keep from progressing, cannot hold the simulation for ever
UNBOUNDED_LIMIT_S = 3650 * 86400.0


class ClusterSim:
    """One simulated cluster and its jobs (a ``scheduler`` view)."""

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
        self.spare[_spread(cfg.spare_nodes, n, self.npl)] = True
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

    # -- bookkeeping -------------------------------------------------------------------------
    def _tick(self) -> None:
        now = self.env.now
        dt = now - self._last
        if dt > 0:
            self.gpu_s["allocated"] += self.alloc_gpus * dt
            self.gpu_s["idle"] += self.idle_gpus * dt
            self.gpu_s["down"] += self.down_gpus * dt
            self._last = now

    def _sample(self) -> None:
        self.samples.append((self.env.now, self.alloc_gpus, self.idle_gpus, self.down_gpus))

    def _alloc(self, node: int, delta: int) -> None:
        """Allocate (``delta`` > 0) or free GPUs of ``node``."""
        self.node_alloc[node] += delta
        self.alloc_gpus += delta
        if self.down[node]:
            self.down_gpus -= delta
        else:
            self.idle_gpus -= delta
            if not self.spare[node]:
                self.free_usable -= delta

    def _set_down(self, node: int, down: bool) -> None:
        free = self.gpn - int(self.node_alloc[node])
        sign = 1 if down else -1
        self.down_gpus += sign * free
        self.idle_gpus -= sign * free
        if not self.spare[node]:
            self.free_usable -= sign * free
        self.down[node] = down

    def _set_spare(self, node: int, spare: bool) -> None:
        if not self.down[node]:
            self.free_usable += (-1 if spare else 1) * (self.gpn - int(self.node_alloc[node]))
        self.spare[node] = spare

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

    # -- a job's life ----------------------------------------------------------------------------
    def _cost(self, job: JobState):
        return checkpoint_cost(job.state_bytes, nodes=len(job.alloc.nodes), gpus=job.gpus,
                               host_copy_bytes_per_s=self.acc.pcie_bytes_per_s or 25e9,
                               cfg=self.cfg.checkpoint)  # fmt: skip

    def _load_s(self, job: JobState) -> float:
        return self._cost(job).load_s if job.steps_done > 0 else 0.0

    def _begin(self, job: JobState, startup_s: float) -> None:
        """Start a run segment on the job's allocation."""
        shape = job.alloc.shape(self.npl, self.npd)
        job.step_s = self.steps.placed(job.spec, shape)
        job.leaf_groups = shape.leaf_groups
        cost = self._cost(job)
        mtbf = mtbf_s(self.cfg.causes, gpus=job.gpus, nodes=len(job.alloc.nodes))
        interval = interval_for(self.cfg.checkpoint, cost.blocking_s, mtbf)
        interval = max(interval, cost.write_s)  # an async write ends before the next starts
        job.interval_s = interval
        work = job.remaining_s()
        length = segment_s(work, startup_s=startup_s, interval_s=interval,
                           blocking_s=cost.blocking_s)  # fmt: skip
        job.segment = Segment(self.now, startup_s, interval, cost.blocking_s, cost.write_s, work,
                              self.now + length)  # fmt: skip
        job.status, job.started_s = "running", self.now
        self.running_ids[job.id] = job
        job.proc = self.env.process(self._run(job, length))

    def _run(self, job: JobState, length_s: float):
        try:
            yield self.env.timeout(length_s)
        except simpy.Interrupt:
            return
        self._finish(job)

    def _finish(self, job: JobState) -> None:
        seg = job.segment
        p = progress_at(seg.end_s - seg.start_s, startup_s=seg.startup_s,
                        interval_s=seg.interval_s, blocking_s=seg.blocking_s)  # fmt: skip
        job.time["startup"] += p.startup_s
        job.book_train(seg.work_s)
        job.time["checkpoint"] += seg.end_s - seg.start_s - p.startup_s - seg.work_s
        job.steps_done = job.steps_total
        job.segment, job.proc = None, None
        self.running_ids.pop(job.id, None)
        self._release(job)
        job.status, job.end_s = "done", self.now
        self.note("finish", job.id)
        self.done += 1
        if self._bar is not None and self.cfg.horizon_s is None:
            self._bar.update(1)
        if self.done == self._runnable:
            self.all_done.succeed()
        self._kick()

    def _settle(self, job: JobState, *, graceful: bool) -> None:
        """Stop the job's segment now: book its time; keep what a checkpoint saved."""
        seg = job.segment
        p = progress_at(self.now - seg.start_s, startup_s=seg.startup_s,
                        interval_s=seg.interval_s, blocking_s=seg.blocking_s,
                        write_s=seg.write_s)  # fmt: skip
        safe = p.train_s if graceful else p.durable_s
        job.time["startup"] += p.startup_s
        job.book_train(safe)
        job.time["lost"] += p.train_s - safe
        job.time["checkpoint"] += p.checkpoint_s
        job.steps_done = min(job.steps_total, job.steps_done + safe / job.step_s)
        if job.proc is not None and job.proc.is_alive:
            job.proc.interrupt()
        job.segment, job.proc = None, None
        self.running_ids.pop(job.id, None)

    def _hold(self, job: JobState, seconds: float, phase: str, then: str) -> None:
        job.status, job.hold_until = "holding", self.now + seconds
        job.hold_start, job.hold_phase = self.now, phase
        self.env.process(self._holding(job, seconds, phase, then))

    def _holding(self, job: JobState, seconds: float, phase: str, then: str):
        yield self.env.timeout(seconds)
        job.time[phase] += self.now - job.hold_start
        job.hold_until = math.nan
        failed = [n for n in job.alloc.nodes if self.down[n]]
        if then == "requeue":
            self.making.discard(job.id)
            self._release(job)
            self._enqueue(job, back=self.cfg.policy == "gang")
        elif failed and not self._swap(job, failed):
            self._release(job)
            self._enqueue(job)
        else:
            job.restarts += 1
            extra = self.cfg.reschedule_s if failed else 0.0
            self.note("restart", job.id, detail="spare" if failed else "in place")
            self._begin(job, extra + self.cfg.restart_s + self._load_s(job))
        self._kick()

    def _swap(self, job: JobState, failed: list[int]) -> bool:
        """Replace ``failed`` nodes of the job by free spares (same leaf group first)."""
        spares = np.flatnonzero(self.spare & ~self.down & (self.node_alloc == 0))
        if len(spares) < len(failed):
            return False
        self._tick()
        for old in failed:
            same = spares[spares // self.npl == old // self.npl]
            new = int(same[0] if len(same) else spares[0])
            spares = spares[spares != new]
            count = self.node_jobs[old].pop(job.id)
            self._alloc(old, -count)
            self._set_spare(new, False)
            self._alloc(new, count)
            self.node_jobs[new][job.id] = count
            job.alloc = job.alloc.replace_node(old, new)
        self._sample()
        return True

    def _release(self, job: JobState) -> None:
        self._tick()
        for node, count in zip(job.alloc.nodes, job.alloc.counts, strict=True):
            self._alloc(node, -count)
            del self.node_jobs[node][job.id]
        self._sample()
        job.alloc_s += self.now - job.alloc_at
        job.alloc = None

    def _enqueue(self, job: JobState, *, back: bool = False) -> None:
        if back:
            self._seq += 1
            job.order = (-job.priority, math.inf, self._seq)
        job.status, job.queued_at = "queued", self.now
        bisect.insort(self.queue, job, key=lambda j: j.order)

    def _kick(self) -> None:
        preempts = self.cfg.policy in ("priority", "gang")
        if self.queue and (self.free_usable > 0 or preempts):
            scheduler.run_pass(self.cfg.policy, self.queue, self, depth=self.cfg.backfill_depth)

    # -- failures and repairs --------------------------------------------------------------------
    def _fail(self, k: int, unit: int) -> None:
        cause = self.cfg.causes[k]
        if cause.scope == "job":
            self._job_failure(cause, unit)
            return
        if cause.scope == "leaf":
            nodes = range(unit * self.npl, min((unit + 1) * self.npl, len(self.down)))
        else:
            nodes = [unit // self.gpn if cause.unit == "gpu" else unit]
        hit = [n for n in nodes if not self.down[n]]
        if not hit:
            return  # failures of a part under repair are dropped
        self._tick()
        for node in hit:
            if self.spare[node]:
                self._set_spare(node, False)
            self._set_down(node, True)
            self.note("failure", node=node, cause=cause.name)
            repair = self.env.timeout(cause.repair_s)
            repair.callbacks.append(lambda _e, node=node: self._repair(node))
        self._sample()
        victims = {j for n in hit for j in self.node_jobs[n]}
        for job_id in sorted(victims):
            self._interrupt(self.jobs[job_id], cause)

    def _job_failure(self, cause, unit: int) -> None:
        if cause.unit in ("gpu", "job_gpu"):
            node, slot = divmod(unit, self.gpn)
            owner = _slot_owner(self.node_jobs[node], slot)
            victims = [owner] if owner else []
        elif cause.unit == "node":
            victims = sorted(self.node_jobs[unit])
        else:
            nodes = range(unit * self.npl, min((unit + 1) * self.npl, len(self.down)))
            victims = sorted({j for n in nodes for j in self.node_jobs[n]})
        for job_id in victims:
            self.note("failure", job_id, cause=cause.name)
            self._interrupt(self.jobs[job_id], cause)

    def _interrupt(self, job: JobState, cause) -> None:
        if job.status != "running":
            return  # already stopping: one interruption
        job.interruptions[cause.name] = job.interruptions.get(cause.name, 0) + 1
        self.note("interruption", job.id, cause=cause.name)
        self._settle(job, graceful=cause.graceful)
        if cause.graceful:
            self._hold(job, self._cost(job).blocking_s, "save", "restart")
        else:
            self._hold(job, cause.detection_s, "detect", "restart")

    def _repair(self, node: int) -> None:
        self._tick()
        self._set_down(node, False)
        if self.spare.sum() < self.cfg.spare_nodes and self.node_alloc[node] == 0:
            self._set_spare(node, True)
        self._sample()
        self.note("repair", node=node)
        self._kick()

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

    def _failures(self):
        start, horizon = 0.0, self.cfg.horizon_s
        units = {"gpu": self.cfg.capacity_gpus, "job_gpu": self.cfg.capacity_gpus,
                 "node": self.cfg.total_nodes, "leaf": -(-self.cfg.total_nodes // self.npl)}  # fmt: skip
        while horizon is None or start < horizon:
            span = CHUNK_S if horizon is None else horizon
            for t, k, unit in failure_events(
                self.cfg.causes, units=units, horizon_s=span, rng=self.fail_rng,
                distribution=self.cfg.distribution, shape=self.cfg.weibull_shape,
            ):  # fmt: skip
                yield self.env.timeout(start + t - self.now)
                self._fail(k, unit)
            start += span
            yield self.env.timeout(max(start - self.now, 0.0))

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


def _spread(count: int, nodes: int, npl: int) -> list[int]:
    """``count`` spare nodes, taken round-robin from the ends of the leaf groups."""
    groups = -(-nodes // npl)
    out: list[int] = []
    k = 0
    while len(out) < count and k < npl:
        for g in range(groups):
            node = min((g + 1) * npl, nodes) - 1 - k
            if node >= g * npl and len(out) < count:
                out.append(node)
        k += 1
    return sorted(out)


def _slot_owner(jobs_on_node: dict[str, int], slot: int) -> str | None:
    """The job holding GPU ``slot`` of a node (jobs fill the node in the order they came)."""
    for job_id, count in jobs_on_node.items():
        if slot < count:
            return job_id
        slot -= count
    return None


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
