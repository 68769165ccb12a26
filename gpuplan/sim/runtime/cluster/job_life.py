"""A job's life on the simulated cluster: a run segment on its allocation, its end, a segment
stopped by a failure or a preemption (what a checkpoint saved is kept), the hold that follows
(failure detection, final save) and the restart, in place, on spares or through the queue."""

from __future__ import annotations

import bisect
import math

import numpy as np
import simpy

from gpuplan.sim.runtime.cluster import scheduler
from gpuplan.sim.runtime.cluster.checkpoint import (
    checkpoint_cost,
    interval_for,
    progress_at,
    segment_s,
)
from gpuplan.sim.runtime.cluster.failures import mtbf_s
from gpuplan.sim.runtime.cluster.state import JobState, Segment


class JobLife:
    """``ClusterSim``'s handling of a job from start to end (mixed in: it books GPUs through
    ``GpuBooks`` and schedules through the simulation's scheduling pass)."""

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
